"""The chat session: a conversation whose agent answers by calling kernelcast's own tools.

A small LangGraph StateGraph drives each turn::

    START -> command (a /slash line) | agent (free text, asks the LLM)
    command | agent -> approve -> execute -> agent (model calls) | END (slash calls)

The LLM speaks a JSON protocol through :mod:`kernelcast.agents.llm_client` (one object
per reply: a tool call or an answer), so any OpenAI-compatible server works,
grammar-constrained ones included. Before ``optimize_kernel`` spends budget
the ``approve`` node shows the plan and waits for the user through a
LangGraph ``interrupt``; the conversation and a pending approval are
checkpointed in ``<KERNELCAST_HOME>/chat.db`` and resume by session id.
Every tool error, unknown tool or malformed argument becomes a message and
the session carries on.
"""

from __future__ import annotations

import json
import operator
import shlex
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict, get_origin

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel, Field, ValidationError

from kernelcast import api
from kernelcast import chat_tools as ops
from kernelcast.settings import get_settings
from kernelcast.tools.task import Task

Message = dict[str, Any]  # {"role": user|assistant|tool|note, "content": str, ["tool": name], ["call": {...}]}
YES = {"y", "yes", "approve", "approved", "ok", "go", "sure"}
NO = {"n", "no", "cancel", "deny", "stop"}
HISTORY_MESSAGES = 12  # messages of context the model sees
TOOL_TEXT_LIMIT = 1500  # characters of one tool result the model sees

NO_MODEL_HELP = (
    "No model is configured, so only slash commands work (type /help). To chat in free text, start with "
    "`kernelcast chat --model MODEL` or set KERNELCAST_MODEL (a litellm model string, e.g. openai/gpt-4o-mini); "
    "for a local OpenAI-compatible server (llama.cpp, vLLM) also set KERNELCAST_API_BASE, e.g. "
    "http://127.0.0.1:8080/v1.")


# ---- chat-only commands (a file on this machine is fine here; the MCP tools take source text) ----
class ReportOutput(BaseModel):
    html: str

    def text(self) -> str:
        return f"report written: {self.html} (PNGs beside it)"


def measure_file(task: ops.TaskName, file: Annotated[str | None, Field(description="kernel or candidate .json")] = None,
                 sizes: ops.SizesArg = "full") -> ops.MeasureOutput:
    """/measure TASK [FILE]: measure the reference or a kernel file."""
    t = _task(task)
    return ops.measure_candidate(t, ops.file_candidate(t, file), sizes)


def forecast_file(task: ops.TaskName, file: Annotated[str, Field(description="kernel or candidate .json")],
                  forecaster: ops.ForecasterName = "learned", model: str | None = None) -> ops.ForecastOutput:
    """/forecast TASK FILE: forecast a kernel file's speedup without measuring it."""
    t = _task(task)
    return ops.forecast_candidate(t, ops.file_candidate(t, file), forecaster, model)


def write_run_report(run_id: str, compare: list[str] | None = None) -> ReportOutput:
    """/report RUN [--compare RUN]: write the run's HTML report with plots."""
    from kernelcast.report import write_report

    with ops.clear_errors():
        return ReportOutput(html=str(write_report(run_id, compare=compare or [])))


def _task(name: str) -> Task:
    with ops.clear_errors():
        return api.as_task(name)


# slash command -> (tool, positional parameter names; a trailing "*" takes all remaining)
COMMANDS: dict[str, tuple[str, list[str]]] = {
    "tasks": ("list_tasks", []),
    "task": ("describe_task", ["task"]),
    "optimize": ("optimize_kernel", ["task"]),
    "measure": ("measure_file", ["task", "file"]),
    "forecast": ("forecast_file", ["task", "file"]),
    "runs": ("list_runs", ["task"]),
    "show": ("get_run", ["run_id"]),
    "compare": ("compare_runs", ["run_ids*"]),
    "report": ("write_run_report", ["run_id"]),
}
CHAT_ONLY: dict[str, Callable[..., BaseModel]] = {f.__name__: f for f in (measure_file, forecast_file,
                                                                         write_run_report)}
REGISTRY: dict[str, Callable[..., BaseModel]] = {**ops.TOOLS, **CHAT_ONLY}
ARGS: dict[str, type[BaseModel]] = {name: ops.args_model(fn) for name, fn in REGISTRY.items()}

HELP = """Slash commands (no model needed):
  /tasks                                   list the built-in tasks
  /task NAME                               show one task
  /measure TASK [FILE] [--sizes small]     measure the reference or a kernel file
  /forecast TASK FILE [--forecaster F]     forecast a kernel file's speedup
  /optimize TASK [--budget N] [--router selective|topk|measure-all] [--threshold T] [--sizes small]
            [--forecaster learned|llm|none] [--generator offline|llm] [--seed N]   (asks before spending)
  /runs [TASK] [--limit N]                 recent runs
  /show RUN                                one run
  /compare RUN RUN ...                     runs side by side
  /report RUN [--compare RUN]              write the HTML report with plots
  /help, /quit
Anything else goes to the model (when one is configured)."""


class CommandError(ValueError):
    """A slash line that cannot be turned into a tool call."""


def parse_command(line: str) -> dict[str, Any] | str:
    """A ``/command`` line -> a validated tool call ``{"tool", "arguments"}``, or text to show (``/help``)."""
    try:
        words = shlex.split(line[1:])
    except ValueError as exc:
        raise CommandError(f"cannot parse {line!r}: {exc}") from None
    if not words or words[0] == "help":
        return HELP
    name, rest = words[0], words[1:]
    if name not in COMMANDS:
        raise CommandError(f"unknown command /{name} (type /help)")
    tool, positional_names = COMMANDS[name]
    positionals: list[str] = []
    options: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            key, eq, value = word[2:].partition("=")
            if not eq:
                if i + 1 >= len(rest):
                    raise CommandError(f"option --{key} needs a value")
                i += 1
                value = rest[i]
            key = key.replace("-", "_")
            options[key] = [*options[key], value] if isinstance(options.get(key), list) else (
                [options[key], value] if key in options else value)
        else:
            positionals.append(word)
        i += 1
    arguments: dict[str, Any] = {}
    for pname in positional_names:
        if pname.endswith("*"):
            arguments[pname[:-1]], positionals = positionals, []
        elif positionals:
            arguments[pname] = positionals.pop(0)
    if positionals:
        raise CommandError(f"/{name}: unexpected argument(s) {' '.join(positionals)} (type /help)")
    arguments.update(options)
    return {"tool": tool, "arguments": validate_call(tool, arguments)}


def validate_call(tool: str, arguments: Any, allowed: Collection[str] = tuple(ARGS)) -> dict[str, Any]:
    """Arguments checked against the tool's signature (types, choices, required, no unknown names)."""
    if tool not in allowed:
        raise CommandError(f"there is no tool named {tool!r}; tools: {', '.join(ops.TOOLS)}")
    if isinstance(arguments, str):  # arguments sent as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            pass
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise CommandError(f"{tool}: arguments must be an object, got {type(arguments).__name__}")
    model = ARGS[tool]
    for key, value in list(arguments.items()):  # a single value where a list is expected
        info = model.model_fields.get(key)
        if info is not None and isinstance(value, str) and _is_list(info.annotation):
            arguments[key] = [v for v in value.split(",") if v]
    try:
        return model.model_validate(arguments).model_dump(exclude_unset=True)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors())
        raise CommandError(f"{tool}: {problems}") from None


def _is_list(annotation: Any) -> bool:
    from typing import get_args

    return get_origin(annotation) is list or any(get_origin(a) is list for a in get_args(annotation))


# ---- the model's side -------------------------------------------------------------------
class Action(BaseModel):
    """One model reply: a tool call or an answer."""

    tool: str | None = None
    arguments: Any = None
    answer: str | None = None


ACTION_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "object", "properties": {"tool": {"type": "string"}, "arguments": {"type": "object"}},
     "required": ["tool", "arguments"]},
    {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
]}


def tool_catalog() -> str:
    """One line per tool the model may call: ``name(param: type = default, ...): description``."""
    lines = []
    for name, fn in ops.TOOLS.items():
        schema = ARGS[name].model_json_schema()
        params = []
        for pname, prop in schema.get("properties", {}).items():
            kind = _schema_type(prop)
            params.append(f"{pname}: {kind}" + (f" = {json.dumps(prop['default'])}" if "default" in prop else ""))
        doc = (fn.__doc__ or "").strip().splitlines()[0]
        lines.append(f"- {name}({', '.join(params)}): {doc}")
    return "\n".join(lines)


def _schema_type(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "|".join(json.dumps(v) for v in prop["enum"])
    if "anyOf" in prop:
        return "|".join(_schema_type(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return f"list[{_schema_type(prop.get('items', {}))}]"
    return str(prop.get("type", "any"))


def system_prompt() -> str:
    return (
        "You are kernelcast's assistant. kernelcast optimizes OpenCL/CUDA kernels and treats hardware "
        "measurements as scarce. Reply with exactly one JSON object and nothing else:\n"
        '{"tool": "<tool name>", "arguments": {...}} to call a tool, or\n'
        '{"answer": "<your reply to the user>"} to answer.\n'
        f"Tools:\n{tool_catalog()}\n"
        "Use a tool when the user asks for facts about tasks, kernels or runs; never invent measurements. "
        "After a tool result, answer briefly from it. For a quick optimize use sizes \"small\" and a small budget.")


def model_messages(history: list[Message]) -> list[dict[str, str]]:
    """The conversation as chat messages for the model (recent ones, tool results trimmed, roles alternating)."""
    out: list[dict[str, str]] = []
    for m in history[-HISTORY_MESSAGES:]:
        if m["role"] == "note":
            continue
        if m["role"] == "tool":
            role, text = "user", f"[result of {m.get('tool')}]\n{m['content'][:TOOL_TEXT_LIMIT]}"
        elif m["role"] == "assistant" and m.get("call"):
            role, text = "assistant", json.dumps({"tool": m["call"]["tool"], "arguments": m["call"]["arguments"]})
        else:
            role, text = m["role"], m["content"]
        if out and out[-1]["role"] == role:
            out[-1]["content"] += "\n\n" + text
        else:
            out.append({"role": role, "content": text})
    return [{"role": "system", "content": system_prompt()}, *out]


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
    return {k: full[k] for k in ("task", "router", "budget", "threshold", "sizes", "forecaster", "generator", "seed")}


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
            return {"messages": [note(f"error: {exc}")], "call": None, "next": "end"}
        if isinstance(parsed, str):
            return {"messages": [{"role": "assistant", "content": parsed}], "call": None, "next": "end"}
        return {"call": {**parsed, "origin": "user"}, "next": "approve"}

    def agent(self, state: ChatState) -> dict[str, Any]:
        from kernelcast.agents.llm_client import LLMError

        if self.client is None:
            return {"messages": [note(NO_MODEL_HELP)], "call": None, "next": "end"}
        steps = state.get("steps", 0)
        if steps >= self.max_steps:
            return {"messages": [note(f"stopped: the model used its {self.max_steps} steps for this message")],
                    "call": None, "next": "end"}
        try:
            reply = self.client.complete(model_messages(state["messages"]), schema=Action, json_schema=ACTION_SCHEMA,
                                         max_tokens=self.max_tokens)
            action: Action = reply.parsed  # type: ignore[assignment]
        except LLMError as exc:
            if exc.kind == "parse" and exc.text and exc.text.strip():  # plain prose: the model answered
                return {"messages": [{"role": "assistant", "content": exc.text.strip()}], "call": None,
                        "steps": steps + 1, "next": "end"}
            return {"messages": [note(f"the model's reply was unusable ({exc}); the session continues")],
                    "call": None, "steps": steps + 1, "next": "end"}
        if action.tool:
            record = {"tool": action.tool, "arguments": action.arguments}
            try:  # the model gets the published tools only (the chat-only commands read files)
                call = {"tool": action.tool, "arguments": validate_call(action.tool, action.arguments, ops.TOOLS),
                        "origin": "model"}
            except CommandError as exc:  # unknown tool or bad arguments: tell the model, let it try again
                return {"messages": [{"role": "assistant", "content": "", "call": record},
                                     {"role": "tool", "tool": action.tool, "content": f"error: {exc}"}],
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
        if call["tool"] == "optimize_kernel":
            kwargs["on_event"] = self.on_event
        try:
            text = fn(**kwargs).text()
        except ops.OperationError as exc:
            text = f"error: {exc}"
        except Exception as exc:  # noqa: BLE001 - one broken call must not end the conversation
            text = f"internal error ({type(exc).__name__}): {exc}"
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
        from kernelcast.graphs.graph import checkpointer

        settings = get_settings()
        self.model = model or settings.model
        self.session_id = session_id or new_session_id()
        self.client = None
        if self.model:
            from kernelcast.agents.llm_client import LLMClient

            key = settings.api_key.get_secret_value() if settings.api_key else None
            self.client = LLMClient(self.model, api_base or settings.api_base, key, timeout_s=timeout_s,
                                    max_retries=1)
        self._saver = checkpointer((home or settings.home) / "chat.db")
        self.graph = ChatGraph(self.client, max_steps, max_tokens, on_event).build().compile(checkpointer=self._saver)
        self.config = {"configurable": {"thread_id": self.session_id}, "recursion_limit": 4 * max_steps + 10}

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
