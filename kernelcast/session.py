"""Sessions (ask/tell): another agent is the generator of a run, under kernelcast's budget, forecaster and router.

One set of functions for every front door (MCP tools, chat commands, the Python :class:`Session`):
:func:`start_session` → :func:`suggest_parents` ⇄ :func:`submit_candidates` → :func:`finish_session`, plus
:func:`session_status`. A session is a run whose generator is ``external``: the graph of
:mod:`kernelcast.graphs.search.session_graph`, checkpointed in the runs' SQLite checkpointer, so a session stopped
in any way (a killed server included) resumes by id; reopening one that stopped in the middle of a round
first finishes that round, reusing every measurement already stored. What the functions return is in
:mod:`kernelcast.session_views`.

An open session holds a measurer (worker processes) and the forecaster; they are kept per process
(``_OPEN``) so a server does not rebuild them for every call. That cache holds resources only: everything
a session is lives in the store and the checkpoint.
"""

from __future__ import annotations

import atexit
import copy
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langgraph.types import Command

from kernelcast.agents.generate.base import Proposals
from kernelcast.graphs.config import RunConfig, default
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.errors import SearchFailed
from kernelcast.graphs.run import create_run, open_measurer, open_run, prepare_run
from kernelcast.graphs.search import puct
from kernelcast.graphs.search.budget import Budget
from kernelcast.graphs.search.graph import RECURSION_LIMIT, check_checkpoint, checkpointed_values, checkpointer
from kernelcast.graphs.search.result import RunResult, run_answer
from kernelcast.graphs.search.session_graph import EXTERNAL, SessionCommand, SubmittedCandidate, build_session_graph, expandable
from kernelcast.graphs.search.tree import incumbent_of
from kernelcast.session_views import (
    SessionResult,
    SessionStatus,
    SubmitOutput,
    Suggestions,
    delivered,
    parent_suggestion,
    round_results,
)
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.settings import get_settings
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.store import Store

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph.state import CompiledStateGraph

    from kernelcast.graphs.context import RunContext
    from kernelcast.graphs.search.session_graph import SessionState
    from kernelcast.tools.hardware.measurers.base import Measurer

EventCallback = Callable[[str, dict[str, Any]], None]


class SessionError(InputError, ValueError):
    """Bad input to a session (unknown id, a parent not in the tree, a finished session): one clear line."""


# ---- where sessions live ----------------------------------------------------------------------
def _places(home: Path | None) -> tuple[Path, Path]:
    """(home, database) from the argument or settings."""
    if home is not None:
        return Path(home), Path(home) / "kernelcast.db"
    settings = get_settings()
    return settings.home, settings.db_path


@dataclass
class LiveSession:
    """An open session: its store, measurer, run context and compiled graph (one caller at a time)."""

    session_id: str
    home: Path
    store: Store
    measurer: Measurer
    ctx: RunContext
    saver: SqliteSaver
    app: CompiledStateGraph
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def graph_config(self) -> RunnableConfig:
        config: RunnableConfig = {"configurable": {"thread_id": self.session_id}, "recursion_limit": RECURSION_LIMIT}
        return config

    def snapshot(self) -> Any:
        return self.app.get_state(self.graph_config)

    def state(self) -> SessionState:
        return cast("SessionState", dict(self.snapshot().values))

    def budget(self) -> Budget:
        """The session's ledger and reserve (what it spent, what the search may still spend)."""
        return Budget(self.store, self.session_id, self.ctx.config)

    def advance(self, graph_input: Any, on_event: EventCallback | None = None) -> None:
        """Run the graph until it waits for the caller again (or ends)."""
        quiet = self.ctx.env
        self.ctx.env = replace(quiet, on_event=on_event)
        try:
            for _ in self.app.stream(graph_input, self.graph_config, stream_mode="updates"):
                pass
        except SearchFailed as exc:
            self.store.runs.update(self.session_id, status="failed")
            raise SessionError(str(exc)) from None
        finally:
            self.ctx.env = quiet
        if not self.snapshot().next:  # the report step has written the final row
            return
        self.store.runs.update(self.session_id, spent=self.store.ledger.totals(self.session_id)[0])

    def close(self, status: str | None = "waiting") -> None:
        """Release the measurer and connections; ``status`` (unless None) marks the row as not driven."""
        if status:
            self.store.runs.update(self.session_id, status=status,
                                   spent=self.store.ledger.totals(self.session_id)[0])
        self.measurer.close()
        self.saver.conn.close()
        self.store.close()


_OPEN: dict[tuple[str, str], LiveSession] = {}
_OPEN_LOCK = threading.Lock()  # guards _OPEN
_REOPEN_LOCK = threading.Lock()  # one reopening at a time: two calls never build two contexts for one session


class ExternalGenerator:
    """The generator of a session's run: the caller. The graph never asks it (its step is an interrupt)."""

    name = EXTERNAL

    def propose(self, *args: Any, **kwargs: Any) -> Proposals:
        raise RuntimeError("a session's candidates come from its caller (submit_candidates)")


def _env(home: Path) -> Any:
    settings = get_settings()
    return RunEnv(home=home, measure_timeout_s=settings.measure_timeout_s, api_base=settings.api_base)


def _compile(ctx: RunContext, home: Path) -> LiveSession:
    """The live session of a run context whose generator is the caller (:class:`ExternalGenerator`)."""
    saver = checkpointer(ctx.env.checkpoints)
    app = build_session_graph(ctx).compile(checkpointer=saver)
    return LiveSession(session_id=ctx.run_id, home=home, store=ctx.store, measurer=ctx.measurer, ctx=ctx,
                       saver=saver, app=app)


def _register(db: Path, live: LiveSession) -> None:
    with _OPEN_LOCK:
        if not _OPEN:
            atexit.register(close_all)
        _OPEN[(str(db.resolve()), live.session_id)] = live


def close_all() -> None:
    """Release every open session of this process (they stay resumable)."""
    with _OPEN_LOCK:
        lives = list(_OPEN.values())
        _OPEN.clear()
    for live in lives:
        try:
            live.close()
        except Exception:  # noqa: BLE001,S110 - closing at exit must not raise
            pass


def close_session(session: str, home: Path | None = None) -> None:
    """Release this process's resources of one session (it stays resumable by id)."""
    _, db = _places(home)
    with _OPEN_LOCK:
        key = next((k for k in _OPEN if k[0] == str(db.resolve()) and k[1].startswith(session)), None)
        live = _OPEN.pop(key) if key else None
    if live is not None:
        live.close()


def _row(store: Store, session: str) -> RunRecord:
    row = store.runs.get(session)
    if row is None:
        raise SessionError(f"no session with id {session!r} (start_session returns one)")
    generator = RunConfig.of_run(row).generator
    if generator != EXTERNAL:
        raise SessionError(f"{row.id} is a run with the {generator} generator, not a session (get_run shows it)")
    return row


def _open(session: str, home: Path | None) -> tuple[LiveSession | None, RunRecord]:
    """The open session (reopened from its checkpoint if needed) and its run row; no live session when it
    is finished or failed."""
    with _REOPEN_LOCK:
        return _open_locked(session, home)


def _open_locked(session: str, home: Path | None) -> tuple[LiveSession | None, RunRecord]:
    home, db = _places(home)
    store = Store(db)
    try:
        row = _row(store, session)
    except Exception:
        store.close()
        raise
    key = (str(db.resolve()), row.id)
    with _OPEN_LOCK:
        live = _OPEN.get(key)
    if live is not None or row.status in ("finished", "failed"):
        store.close()
        return live, row
    if row.status == "running" and row.owner_pid != os.getpid():
        store.close()
        raise SessionError(f"session {row.id} is open in process {row.owner_pid}; not driving it twice")
    measurer = None
    try:
        check_checkpoint(home / "checkpoints.db", row.id)  # a checkpoint this code cannot read is refused
        config = RunConfig.of_run(row)
        measurer = open_measurer(config, resolve_task(config.task).backend, store)
        measurer.start()
        live = _compile(open_run(row.id, config, store, _env(home), measurer, generator=ExternalGenerator()), home)
    except Exception:
        if measurer is not None:
            measurer.close()
        store.close()
        raise
    store.runs.claim(row.id)
    try:
        with live.lock:
            snap = live.snapshot()
            if snap.next and not snap.interrupts:  # stopped in the middle of a round: finish it, reusing its buys
                live.advance(None)
    except BaseException:
        live.close(status="interrupted")
        raise
    _register(db, live)
    return live, row


def _finished_values(home: Path | None, session_id: str) -> SessionState:
    """The last checkpointed state of a closed session, read without building its context."""
    home_path, _ = _places(home)
    return cast("SessionState", checkpointed_values(home_path / "checkpoints.db", session_id))


# ---- the operations ------------------------------------------------------------------------------
def start_session(task: str, budget: int = default("budget"), router: str = default("router"), risk: float = default("risk"), *,
                  sizes: str = "full", forecaster: str = default("forecaster"),
                  measure_per_round: int = default("measure_per_round"), seed: int = 0,
                  device: str | None = None, model: str | None = None, home: Path | None = None) -> str:
    """Start a session (a run whose generator is the caller) and return its id; it waits for candidates."""
    settings = get_settings()
    # an unknown task, or a configuration `optimize` refuses (check_startable), fails here, before anything exists
    config, resolved = prepare_run(RunConfig.model_validate({
        "task": task, "budget": budget, "router": router, "risk": risk, "sizes": sizes, "forecaster": forecaster,
        "measure_per_round": measure_per_round, "seed": seed, "generator": EXTERNAL,
        "device": device or settings.device, "model": model or settings.model}))
    home_path, db = _places(home)
    store = Store(db)
    measurer = None
    try:
        measurer = open_measurer(config, resolved.backend, store)
        measurer.start()
        live = _compile(create_run(config, store, _env(home_path), measurer, generator=ExternalGenerator()),
                        home_path)
        run_id = live.session_id
    except Exception:
        if measurer is not None:
            measurer.close()
        store.close()
        raise
    with live.lock:
        live.advance({"run_id": run_id})
    _register(db, live)
    return run_id


def suggest_parents(session: str, count: int = 1, *, home: Path | None = None) -> Suggestions:
    """The parents the search wants mutated next (PUCT order; the first is its choice), with feedback."""
    live = _require_open(session, home, "suggest parents for")
    with live.lock:
        state = live.state()
        nodes = state["nodes"]
        selected = state.get("parent")
        chosen: list[str] = [selected] if selected else []
        probe = copy.deepcopy(nodes)
        while len(chosen) < count:
            for key in chosen:
                probe[key]["exhausted"] = True
            nxt = puct.select(probe, live.ctx.config.puct_c)
            if nxt is None or nxt in chosen:
                break
            chosen.append(nxt)
        parents = [parent_suggestion(live.store, state, key, i == 0) for i, key in enumerate(chosen)]
        return Suggestions(session=live.session_id, task=live.ctx.task.name, parents=parents,
                           hardware=live.ctx.hardware, budget=live.ctx.config.budget, spent=live.budget().spent(),
                           measurements_left=live.budget().allowance(state["nodes"]), incumbent=_incumbent(state))


def submit_candidates(session: str, parent: str | None,
                      candidates: Sequence[SubmittedCandidate | Candidate | dict[str, Any] | str], *,
                      on_event: EventCallback | None = None, home: Path | None = None) -> SubmitOutput:
    """Put the caller's candidates under the budget: validate, forecast, route, measure what the router picks.

    ``parent`` is a node of the tree (hash or unique prefix); None takes the one the search selected.
    A submission with no valid candidate is an error that names each one's problem; the session goes on.
    """
    if not candidates:
        raise SessionError("submit at least one candidate (source plus optional geometry, options and intent)")
    items = [as_submitted(c) for c in candidates]
    live = _require_open(session, home, "submit candidates to")
    with live.lock:
        state = live.state()
        parent_key = _parent_key(live, state, parent)
        command = SessionCommand(action="submit", parent=parent_key, candidates=items)
        live.advance(_resume(command.model_dump()), on_event)
        state = live.state()
        results = round_results(live.store, live.session_id, state)
        if not any(r.valid for r in results):
            problems = "; ".join(f"#{r.index} {r.rejection}: {' '.join(r.validation.split())[:300]}" for r in results)
            raise SessionError(f"no valid candidate in the submission (nothing was measured; the session goes on): "
                               f"{problems}")
        budget = live.budget()
        answer = run_answer(live.store, live.session_id, state["nodes"])
        return SubmitOutput(session=live.session_id, parent=parent_key, results=results, spent=budget.spent(),
                            budget=live.ctx.config.budget, measurements_left=budget.allowance(state["nodes"]),
                            best_speedup=answer.speedup, best=delivered(answer), answer=answer)


def session_status(session: str, *, home: Path | None = None) -> SessionStatus:
    """Where a session stands: budget, tree, best so far, and the last submission's results."""
    live, row = _open(session, home)
    if live is None:
        state = _finished_values(home, row.id)
        left = 0
        store = Store(_places(home)[1])
    else:
        live.lock.acquire()
        state, store = live.state(), live.store
        left = live.budget().allowance(state["nodes"])
    try:
        nodes = state.get("nodes", {})
        counts: dict[str, int] = {}
        for node in nodes.values():
            counts[node["outcome"]] = counts.get(node["outcome"], 0) + 1
        finished = row.status in ("finished", "failed")
        done = RunResult.of_run(row) if finished else None
        answer = done.answer if done is not None else run_answer(store, row.id, nodes)
        best = delivered(answer)
        return SessionStatus(session=row.id, task=row.task, device=row.device,
                             state=row.status if finished else "awaiting_candidates",
                             router=RunConfig.of_run(row).router, budget=row.budget,
                             spent=store.ledger.totals(row.id)[0], measurements_left=left,
                             submissions=state.get("submissions", 0), counts=counts,
                             best_hash=best.candidate_hash if best else None, best_speedup=answer.speedup, best=best,
                             answer=answer,
                             parent=None if finished else state.get("parent"),
                             last_round=round_results(store, row.id, state) if state else [],
                             folder=row.folder)
    finally:
        if live is None:
            store.close()
        else:
            live.lock.release()


def finish_session(session: str, *, on_event: EventCallback | None = None, home: Path | None = None
                   ) -> SessionResult:
    """Verify (confirm the best with a re-measurement and interval), write the report, close the session.

    Finishing a finished session returns its result again.
    """
    live, row = _open(session, home)
    if live is None and row.status == "failed":
        raise SessionError(f"session {row.id} failed; nothing to finish (session_status shows why)")
    if live is not None:
        with live.lock:
            state = live.state()
            if len(state.get("nodes", {})) <= 1:
                raise SessionError(f"session {live.session_id} has no candidate yet: submit some before finishing")
            live.advance(_resume(SessionCommand(action="finish").model_dump()), on_event)
        home_path, db = _places(home)
        with _OPEN_LOCK:
            _OPEN.pop((str(db.resolve()), live.session_id), None)
        live.close(status=None)
    home_path, db = _places(home)
    store = Store(db)
    try:
        row = _row(store, row.id)
        result = RunResult.model_validate(row.summary)
        answer = result.answer.candidate_hash  # the reference when no candidate beat it significantly
        best = store.candidates.get(answer) if answer else None
        page, problem = _html_report(store, result)
        return SessionResult(session=row.id, result=result, report=str(page or Path(result.folder) / "README.md"),
                             readme=str(Path(result.folder) / "README.md"), report_problem=problem,
                             best_source=best.source if best else None)
    finally:
        store.close()


def _html_report(store: Store, result: RunResult) -> tuple[Path | None, str]:
    """A finished session's ``report.html``, as a run's (written once; finishing again finds it): (its path,
    "") or (None, why it could not be written: a report problem never fails the session)."""
    from kernelcast.report import write_report

    page = Path(result.folder) / "report.html"
    if page.is_file():
        return page, ""
    try:
        return write_report(result.run_id, store=store), ""
    except Exception as exc:  # noqa: BLE001 - the session is finished; a plotting problem is only worth a line
        return None, f"report.html not written: {type(exc).__name__}: {exc}"


# ---- helpers -------------------------------------------------------------------------------------
def as_submitted(item: SubmittedCandidate | Candidate | dict[str, Any] | str) -> SubmittedCandidate:
    """Any of: a SubmittedCandidate, a Candidate (its task is checked), a dict of those fields, or source text."""
    if isinstance(item, SubmittedCandidate):
        return item
    if isinstance(item, Candidate):
        return SubmittedCandidate(source=item.source, global_size=item.global_size, local_size=item.local_size or [],
                                  build_options=item.build_options, intent=item.intent, task=item.task,
                                  params=item.params)
    if isinstance(item, str):
        return SubmittedCandidate(source=item)
    return SubmittedCandidate.model_validate(item)


def _resume(value: dict[str, Any]) -> Any:
    return Command(resume=value)


def _require_open(session: str, home: Path | None, doing: str) -> LiveSession:
    live, row = _open(session, home)
    if live is None:
        done = RunResult.of_run(row)
        best = f", answer {done.answer.headline()}" if done is not None else ""
        raise SessionError(f"session {row.id} is {row.status}{best}: cannot {doing} it (start a new session)")
    return live


def _parent_key(live: LiveSession, state: SessionState, parent: str | None) -> str:
    nodes = state["nodes"]
    if parent is None:
        return str(state["parent"])
    matches = [k for k in nodes if k == parent] or [k for k in nodes if parent and k.startswith(parent)]
    if len(matches) != 1:
        what = "matches several nodes" if matches else "is not a node"
        raise SessionError(f"parent {parent!r} {what} of session {live.session_id}'s tree "
                           f"(suggest_parents names the parents to extend)")
    key = matches[0]
    if not expandable(nodes, key):
        node = nodes[key]
        raise SessionError(f"node {key[:8]} cannot be extended: it was {node['outcome']}"
                           + (f" ({node['reason'][:200]})" if node["reason"] else ""))
    return key


def _incumbent(state: SessionState) -> float:
    """The speedup the router judges the next round against (a node confirmed during the search stands on it)."""
    return incumbent_of(state["nodes"], state.get("best"))[0]


# ---- the Python API ------------------------------------------------------------------------------
class Session:
    """A session as an object: ``with Session("saxpy", budget=8) as s: s.suggest(); s.submit([...])``.

    Leaving the ``with`` block normally finishes the session (verify, report; :attr:`result`) once it has
    candidates; leaving it with an exception only releases it, resumable with ``Session(session=id)``.
    """

    def __init__(self, task: str | None = None, budget: int = default("budget"), router: str = default("router"),
                 risk: float = default("risk"), *,
                 session: str | None = None, home: Path | None = None, **options: Any) -> None:
        self.home = home
        self.result: SessionResult | None = None
        if session is not None:
            self.id = session_status(session, home=home).session
        elif task is not None:
            self.id = start_session(task, budget, router, risk, home=home, **options)
        else:
            raise SessionError("give a task to start a session, or session= to resume one")

    def suggest(self, count: int = 1) -> Suggestions:
        return suggest_parents(self.id, count, home=self.home)

    def submit(self, candidates: Sequence[SubmittedCandidate | Candidate | dict[str, Any] | str],
               parent: str | None = None, on_event: EventCallback | None = None) -> SubmitOutput:
        return submit_candidates(self.id, parent, candidates, on_event=on_event, home=self.home)

    def status(self) -> SessionStatus:
        return session_status(self.id, home=self.home)

    def finish(self, on_event: EventCallback | None = None) -> SessionResult:
        self.result = finish_session(self.id, on_event=on_event, home=self.home)
        return self.result

    def close(self) -> None:
        """Release the measurer and the forecaster; the session stays resumable by id."""
        close_session(self.id, self.home)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, *rest: object) -> None:
        if exc is not None:
            self._leave_after(exc)
            return
        try:
            status = self.status()
            if status.state == "awaiting_candidates" and sum(status.counts.values()) > 1:
                self.finish()  # (a session with no candidate yet has nothing to finish: it stays open)
        finally:
            self.close()

    def _leave_after(self, exc: BaseException) -> None:
        """Leaving the block by an exception spends nothing more: a session holding candidates stays resumable
        (the exception says how), one without any is closed as failed, so no empty session is left waiting."""
        try:
            status = self.status()
        except Exception:  # noqa: BLE001 - the caller's exception is the one to see
            self.close()
            return
        if status.state != "awaiting_candidates":
            self.close()
            return
        if sum(status.counts.values()) > 1:
            self.close()
            exc.add_note(f"session {self.id} stays open with what it measured: kernelcast.Session(session="
                         f"{self.id!r}) resumes it")
            return
        _, db = _places(self.home)
        close_session(self.id, self.home)
        store = Store(db)
        try:
            store.runs.update(self.id, status="failed")
        finally:
            store.close()
        exc.add_note(f"session {self.id} had no candidate yet and was closed (nothing was spent)")
