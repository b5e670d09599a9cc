"""The JSON protocol the chat's model speaks: one object per reply, a tool call or an answer.

Any OpenAI-compatible server works, grammar-constrained ones included (:data:`ACTION_SCHEMA`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from kernelcast.tools_registry import TOOLS, spec

Message = dict[str, Any]  # {"role": user|assistant|tool|note, "content": str, ["tool": name], ["call": {...}]}
HISTORY_MESSAGES = 12  # messages of context the model sees
TOOL_TEXT_LIMIT = 1500  # characters of one tool result the model sees

NO_MODEL_HELP = (
    "No model is configured, so only slash commands work (type /help). To chat in free text, start with "
    "`kernelcast chat --model MODEL` or set KERNELCAST_MODEL (a litellm model string, e.g. openai/gpt-4o-mini); "
    "for a local OpenAI-compatible server (llama.cpp, vLLM) also set KERNELCAST_API_BASE, e.g. "
    "http://127.0.0.1:8080/v1.")


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
    for name, fn in TOOLS.items():
        schema = spec(name).args.model_json_schema()
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
