"""The chat session: a conversation whose agent answers by calling kernelcast's own tools.

A small LangGraph StateGraph drives each turn::

    START -> command (a /slash line) | agent (free text, asks the LLM)
    command | agent -> approve -> execute -> agent (model calls) | END (slash calls)

The LLM speaks a JSON protocol through :mod:`kernelcast.agents.llm.client` (one object
per reply: a tool call or an answer), so any OpenAI-compatible server works,
grammar-constrained ones included. Before ``optimize_kernel`` spends budget
the ``approve`` node shows the plan and waits for the user through a
LangGraph ``interrupt``; the conversation and a pending approval are
checkpointed in ``<KERNELCAST_HOME>/chat.db`` and resume by session id.
Every tool error, unknown tool or malformed argument becomes a message and
the session carries on.
"""

from __future__ import annotations

import operator
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel

from kernelcast import api
from kernelcast import chat_tools as ops
from kernelcast.chat_commands import ARGS, REGISTRY, CommandError, parse_command, validate_call
from kernelcast.chat_protocol import ACTION_SCHEMA, NO_MODEL_HELP, Action, Message, model_messages
from kernelcast.tools.core.errors import KernelcastError
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools_registry import TOOLS, spec

YES = {"y", "yes", "approve", "approved", "ok", "go", "sure"}
NO = {"n", "no", "cancel", "deny", "stop"}


def error_text(exc: Exception) -> str:
    """The chat's one error mapping: a :class:`KernelcastError` is its message, anything else an internal error;
    either way the conversation carries on."""
    if isinstance(exc, KernelcastError):
        return f"error: {exc}"
    return f"internal error ({type(exc).__name__}): {exc}"


def describe_output(output: BaseModel) -> str:
    """A tool's result as the conversation shows it (every tool output model has ``text()``)."""
    text = getattr(output, "text", None)
    return text() if callable(text) else output.model_dump_json()


# ---- the graph ----------------------------------------------------------------------------
class ChatState(TypedDict, total=False):
    messages: Annotated[list[Message], operator.add]
    call: dict[str, Any] | None  # {"tool", "arguments", "origin": user|model}
    steps: int  # model calls in this turn
    next: Literal["approve", "agent", "end"]


def note(text: str) -> Message:
    return {"role": "note", "content": text}


def describe_call(call: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in call["arguments"].items())
    return f"{call['tool']}({args})"


def optimize_plan(arguments: dict[str, Any]) -> dict[str, Any]:
    """What an optimize call will do, defaults filled in (what the user approves)."""
    full = ARGS["optimize_kernel"].model_validate(arguments).model_dump()
    return {k: full[k] for k in ("task", "router", "budget", "sizes", "forecaster", "generator", "seed")}


class ChatGraph:
    """The nodes; holds the model client and the progress callback (neither is checkpointed)."""

    def __init__(self, client: Any | None, max_steps: int, max_tokens: int,
                 on_event: ops.EventCallback | None) -> None:
        self.client = client
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.on_event = on_event

    def build(self) -> StateGraph:
        graph = StateGraph(ChatState)
        graph.add_node("command", self.command)
        graph.add_node("agent", self.agent)
        graph.add_node("approve", self.approve)
        graph.add_node("execute", self.execute)
        graph.add_conditional_edges(START, self.dispatch, ["command", "agent"])
        for node in ("command", "agent", "approve", "execute"):
            graph.add_conditional_edges(node, self.follow, {"approve": "approve", "agent": "agent", "end": END,
                                                           "execute": "execute"})
        return graph

    @staticmethod
    def dispatch(state: ChatState) -> str:
        return "command" if state["messages"][-1]["content"].startswith("/") else "agent"

    @staticmethod
    def follow(state: ChatState) -> str:
        return state.get("next", "end")

    def command(self, state: ChatState) -> dict[str, Any]:
        try:
            parsed = parse_command(state["messages"][-1]["content"])
        except CommandError as exc:
            return {"messages": [note(error_text(exc))], "call": None, "next": "end"}
        if isinstance(parsed, str):
            return {"messages": [{"role": "assistant", "content": parsed}], "call": None, "next": "end"}
        return {"call": {**parsed, "origin": "user"}, "next": "approve"}

    def agent(self, state: ChatState) -> dict[str, Any]:
        if self.client is None:
            return {"messages": [note(NO_MODEL_HELP)], "call": None, "next": "end"}
        steps = state.get("steps", 0)
        if steps >= self.max_steps:
            return {"messages": [note(f"stopped: the model used its {self.max_steps} steps for this message")],
                    "call": None, "next": "end"}
        try:
            reply = self.client.complete(model_messages(state["messages"]), schema=Action, json_schema=ACTION_SCHEMA,
                                         max_tokens=self.max_tokens)
            action = Action.model_validate(reply.parsed)
        except api.LLMError as exc:
            if exc.kind == "parse" and exc.text and exc.text.strip():  # plain prose: the model answered
                return {"messages": [{"role": "assistant", "content": exc.text.strip()}], "call": None,
                        "steps": steps + 1, "next": "end"}
            return {"messages": [note(f"the model's reply was unusable ({exc}); the session continues")],
                    "call": None, "steps": steps + 1, "next": "end"}
        if action.tool:
            record = {"tool": action.tool, "arguments": action.arguments}
            try:  # the model gets the published tools only (the chat-only commands read files)
                call = {"tool": action.tool, "arguments": validate_call(action.tool, action.arguments, TOOLS),
                        "origin": "model"}
            except CommandError as exc:  # unknown tool or bad arguments: tell the model, let it try again
                return {"messages": [{"role": "assistant", "content": "", "call": record},
                                     {"role": "tool", "tool": action.tool, "content": error_text(exc)}],
                        "call": None, "steps": steps + 1, "next": "agent"}
            return {"messages": [{"role": "assistant", "content": "", "call": call}], "call": call,
                    "steps": steps + 1, "next": "approve"}
        if action.answer and action.answer.strip():
            return {"messages": [{"role": "assistant", "content": action.answer.strip()}], "call": None,
                    "steps": steps + 1, "next": "end"}
        return {"messages": [note("the model replied with neither a tool call nor an answer")], "call": None,
                "steps": steps + 1, "next": "end"}

    def approve(self, state: ChatState) -> dict[str, Any]:
        call = state["call"]
        assert call is not None
        if call["tool"] != "optimize_kernel":
            return {"next": "execute"}
        plan = optimize_plan(call["arguments"])
        decision = interrupt({"kind": "approve_optimize", "plan": plan})
        if isinstance(decision, dict) and decision.get("approved"):
            return {"next": "execute"}
        return {"messages": [note("plan declined: nothing was measured")], "call": None, "next": "end"}

    def execute(self, state: ChatState) -> dict[str, Any]:
        call = state["call"]
        assert call is not None
        fn = REGISTRY[call["tool"]]
        kwargs = dict(call["arguments"])
        if spec(call["tool"]).progress:  # tools that measure report each measurement as it lands
            kwargs["on_event"] = self.on_event
        try:
            text = describe_output(fn(**kwargs))
        except Exception as exc:  # noqa: BLE001 - one broken call must not end the conversation
            text = error_text(exc)
        again = call["origin"] == "model" and state.get("steps", 0) < self.max_steps
        return {"messages": [{"role": "tool", "tool": call["tool"], "content": text}], "call": None,
                "next": "agent" if again else "end"}


# ---- the session ------------------------------------------------------------------------------
@dataclass
class ChatReply:
    """What one input produced: new messages to show, a plan waiting for approval, or the end."""

    messages: list[Message] = field(default_factory=list)
    approval: dict[str, Any] | None = None
    quit: bool = False

    @property
    def text(self) -> str:
        parts = [m["content"] or describe_call(m["call"]) for m in self.messages]
        if self.approval:
            parts.append(plan_text(self.approval))
        return "\n".join(parts)


def plan_text(approval: dict[str, Any]) -> str:
    plan = approval.get("plan", {})
    return ("plan: optimize " + ", ".join(f"{k} {v}" for k, v in plan.items())
            + f" — spends up to {plan.get('budget')} hardware measurements. Approve? (yes/no)")


def new_session_id() -> str:
    return f"chat-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


class ChatSession:
    """A resumable conversation: ``send`` takes one input line and returns what to show."""

    def __init__(self, model: str | None = None, session_id: str | None = None, *, home: Path | None = None,
                 api_base: str | None = None, max_steps: int = 4, max_tokens: int = 400,
                 on_event: ops.EventCallback | None = None, timeout_s: float = 120.0) -> None:
        settings = get_settings()
        self.model = model or settings.model
        self.session_id = session_id or new_session_id()
        self.client = None
        if self.model:
            key = settings.api_key.get_secret_value() if settings.api_key else None
            self.client = api.model_client(self.model, api_base or settings.api_base, key, timeout_s)
        self._saver = api.conversation_store((home or settings.home) / "chat.db")
        self.graph = ChatGraph(self.client, max_steps, max_tokens, on_event).build().compile(checkpointer=self._saver)
        self.config: RunnableConfig = {"configurable": {"thread_id": self.session_id},
                                       "recursion_limit": 4 * max_steps + 10}

    # ---- state ------------------------------------------------------------------------------
    def history(self) -> list[Message]:
        return list(self.graph.get_state(self.config).values.get("messages", []))

    def pending_approval(self) -> dict[str, Any] | None:
        interrupts = self.graph.get_state(self.config).interrupts
        return interrupts[0].value if interrupts else None

    # ---- one input ----------------------------------------------------------------------------
    def send(self, line: str) -> ChatReply:
        line = line.strip()
        if line in ("/quit", "/exit"):
            return ChatReply(quit=True)
        if not line:
            return ChatReply(approval=self.pending_approval())
        if self.pending_approval() is not None:
            word = line.lower().rstrip(".!")
            reply = self._run(Command(resume={"approved": word in YES}))
            if word in YES or word in NO:
                return reply
            follow = self.send(line)  # declined by moving on: handle the new input too
            return ChatReply(messages=reply.messages + follow.messages, approval=follow.approval, quit=follow.quit)
        return self._run({"messages": [{"role": "user", "content": line}], "steps": 0, "call": None})

    def _run(self, graph_input: Any) -> ChatReply:
        before = len(self.history())
        try:
            self.graph.invoke(graph_input, self.config)
        except Exception as exc:  # noqa: BLE001 - the session survives anything a turn can raise
            return ChatReply(messages=[note(f"internal error ({type(exc).__name__}): {exc}")])
        new = [m for m in self.history()[before:] if m["role"] != "user"]
        return ChatReply(messages=new, approval=self.pending_approval())

    def close(self) -> None:
        self._saver.conn.close()

    def __enter__(self) -> ChatSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
