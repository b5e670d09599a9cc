"""`kernelcast chat`: a thin terminal loop around :class:`kernelcast.chat.ChatSession`."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import typer
from rich.markup import escape

from kernelcast.console import console

app = typer.Typer()
RESUME_SHOWN = 6  # messages replayed when a session is resumed


def show(messages: list[dict[str, Any]]) -> None:
    """Print messages by role: tool calls dim, tool results plain, notes yellow, answers cyan."""
    from kernelcast.chat import describe_call

    for m in messages:
        if m["role"] == "user":
            console.print(f"[bold]you>[/] {escape(m['content'])}")
        elif m["role"] == "assistant" and m.get("call"):
            console.print(f"[dim]→ {escape(describe_call(m['call']))}[/]")
        elif m["role"] == "assistant":
            console.print(f"[bold cyan]kernelcast>[/] {escape(m['content'])}")
        elif m["role"] == "note":
            console.print(f"[yellow]{escape(m['content'])}[/]")
        else:
            console.print(escape(m["content"]), highlight=False)


def progress(kind: str, payload: dict[str, Any]) -> None:
    """One line per hardware measurement of an approved optimize."""
    from kernelcast.api import Spend, parse

    event = parse(kind, payload)
    if isinstance(event, Spend):
        speed = f" {event.speedup:.3f}x" if event.speedup else ""
        console.print(f"[dim]  measured {str(payload.get('candidate'))[:8]}: {event.status}{speed} "
                      f"({event.spent}/{event.budget})[/]")


@app.command("chat")
def chat(
    model: str | None = typer.Option(None, "--model", "-m", help="litellm model string (default: KERNELCAST_MODEL)"),
    session: str | None = typer.Option(None, "--session", "-s", help="resume this session id"),
    max_steps: int = typer.Option(4, "--max-steps", min=1, help="model calls per message at most"),
) -> None:
    """Talk to kernelcast: slash commands always work; free text goes to the model's tool-calling agent."""
    from kernelcast.chat import ChatSession, plan_text

    with ChatSession(model=model, session_id=session, max_steps=max_steps, on_event=progress) as chat_session:
        history = chat_session.history()
        state = f"resumed, {len(history)} messages" if history else "new"
        console.print(f"[bold]kernelcast chat[/] — session {chat_session.session_id} ({state}), model "
                      f"{chat_session.model or 'none: slash commands only'}. /help for commands, /quit to leave.",
                      highlight=False)
        show(history[-RESUME_SHOWN:])
        pending = chat_session.pending_approval()
        if pending:
            console.print(f"[bold magenta]{escape(plan_text(pending))}[/]")
        while True:
            try:
                line = console.input("[bold]you>[/] ")
            except (EOFError, KeyboardInterrupt):
                console.print()
                break
            with console.status("working...", spinner="dots") if console.is_terminal else nullcontext():
                reply = chat_session.send(line)
            if reply.quit:
                break
            show(reply.messages)
            if reply.approval:
                console.print(f"[bold magenta]{escape(plan_text(reply.approval))}[/]")
        console.print(f"resume with: kernelcast chat --session {chat_session.session_id}", highlight=False)
