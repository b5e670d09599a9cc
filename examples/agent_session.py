"""Play the external agent: write the candidates yourself, and let kernelcast's budget, forecaster and router decide
which of them the hardware sees.

    python examples/agent_session.py [--task saxpy] [--budget 6] [--sizes small|full] [--rounds 4] [--per-round 6]

The "agent" here is kernelcast's own LLM generator when a model is configured (KERNELCAST_MODEL, and
KERNELCAST_API_BASE for a local server), else the offline generator, so the script runs without a network. Either
way it sees only what any outside agent sees through a session: the parent the search chose, with its source,
speedup, errors, the children already tried and the device, and the fate of each candidate it submitted. An MCP
client does the same with the tools start_session, suggest_parents, submit_candidates and finish_session.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import kernelcast
from kernelcast.agents.generate.base import GenerationContext, Generator
from kernelcast.agents.registry import DEFAULT_FORECASTER, FORECASTERS
from kernelcast.session import SessionError
from kernelcast.session_views import ParentSuggestion, Suggestions
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import resolve_task


def make_agent(max_tokens: int) -> Generator:
    """The LLM generator behind the session interface when a model is configured, else the offline one."""
    model = os.environ.get("KERNELCAST_MODEL")
    if model:
        from kernelcast.agents.factory import llm_client
        from kernelcast.agents.generate.llm import LLMGenerator

        return LLMGenerator(llm_client(model), max_tokens=max_tokens)
    from kernelcast.agents.generate.offline import OfflineGenerator

    return OfflineGenerator()


def parent_candidate(task: str, view: ParentSuggestion) -> Candidate:
    return Candidate(task=task, source=view.source, global_size=view.global_size, local_size=view.local_size,
                     build_options=view.build_options, params=view.params, intent=view.intent)


def context_for(suggestion: Suggestions, view: ParentSuggestion, feedback: list[str], seed: int) -> GenerationContext:
    """What the agent knows, built only from the session's feedback."""
    kind = "forecast" if view.speedup_kind == "forecast" else "measured"
    return GenerationContext(parent_speedup=view.speedup, parent_speedup_kind=kind, hardware=suggestion.hardware,
                             parent_report="\n".join(view.errors), siblings={s.hash for s in view.siblings},
                             feedback=feedback, seed=seed)


def on_event(kind: str, payload: dict[str, Any]) -> None:
    if kind == "spend":
        speed = f"{payload['speedup']:.3f}x" if payload.get("speedup") else "-"
        print(f"  measurement {payload['spent']}/{payload['budget']} ({payload['phase']}): {payload['status']} {speed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="saxpy")
    parser.add_argument("--budget", type=int, default=6, help="hardware measurements to spend")
    parser.add_argument("--sizes", choices=["small", "full"], default="small")
    parser.add_argument("--forecaster", choices=list(FORECASTERS), default=DEFAULT_FORECASTER)
    parser.add_argument("--rounds", type=int, default=4, help="submissions at most")
    parser.add_argument("--per-round", type=int, default=6, help="candidates the agent writes per submission")
    parser.add_argument("--max-tokens", type=int, default=3000, help="LLM agent: tokens per reply")
    args = parser.parse_args()

    task = resolve_task(args.task)
    agent = make_agent(args.max_tokens)
    feedback: list[str] = []
    with kernelcast.Session(args.task, budget=args.budget, sizes=args.sizes, forecaster=args.forecaster) as session:
        print(f"session {session.id} ({task.name}, budget {args.budget}); agent: {agent.name}")
        for round_no in range(1, args.rounds + 1):
            suggestion = session.suggest()
            view = suggestion.parents[0]
            if suggestion.measurements_left == 0:
                print("the search's part of the budget is spent; finishing")
                break
            print(f"round {round_no}: parent {view.hash[:8]} ({view.intent}), {suggestion.measurements_left} "
                  f"measurements left")
            parent = parent_candidate(task.name, view)
            proposals = agent.propose(task, parent, context_for(suggestion, view, feedback, round_no),
                                      args.per_round)
            if not proposals.candidates:
                print(f"  the agent wrote nothing: {proposals.report.summary()}")
                continue
            try:
                out = session.submit(proposals.candidates, parent=view.hash, on_event=on_event)
            except SessionError as exc:
                print(f"  refused: {exc}")
                feedback = [str(exc)[:300]]
                continue
            for result in out.results:
                print("  " + result.text())
            feedback = [f"{r.rejection}: {r.validation[:200]}" for r in out.results if not r.valid]
    done = session.result
    if done is None:
        print(f"no candidate was submitted: session {session.id} stays open (resume it with "
              f"kernelcast.Session(session=...))")
        return
    best = done.result
    print(f"answer: {best.answer.text()}")  # the reference at 1.0x unless a candidate beats it significantly
    print(f"spent {best.spent} of {best.budget} measurements on {best.considered} candidates")
    print(f"report: {done.report}")


if __name__ == "__main__":
    main()
