"""The replay check: small runs recorded on a real device, replayed through the replay measurer.

A recording keeps what a replay needs (the device's spec and probes, every measurement the run bought, a
session's submissions) and what the replay must reproduce: each routing decision (candidate, verdict, stage,
P(beat), ...) in order, and the run's results (ledger, best, spent, stop reason). ``tests/e2e/test_replay_check.py``
replays each recording with the code as it is now and compares; a refactoring that says "behaviour unchanged" must
keep it passing.

The expected decisions are those of a replay with the code the recording was made with, not those of the live
run: a replay answers a confirmation with the candidate's search measurement (``ReplayMeasurer.stored``), so a
live run's confirmed speedups, and what follows from them, differ from any replay's. :func:`live_differences`
says where.

Record anew (needs an OpenCL device; minutes)::

    .venv/bin/python -m support.replay_check record tests/data/replay_check.json.gz   # from tests/
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from langgraph.types import Command
from pydantic import BaseModel, Field

from kernelcast.agents.forecast.device_probe import PROBE, SCATTER_PROBE, SIMD_PROBE, WORK_GROUP_PROBE
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunEnv
from kernelcast.graphs.run import open_measurer, open_run, start_run
from kernelcast.graphs.search.graph import RECURSION_LIMIT, checkpointer
from kernelcast.graphs.search.session_graph import EXTERNAL, SessionCommand, build_session_graph
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import resolve_task
from kernelcast.tools.store.store import Store

PROBES = (PROBE, WORK_GROUP_PROBE, SCATTER_PROBE, SIMD_PROBE)


class Decision(BaseModel):
    """One routing decision as the route event logged it."""

    candidate: str
    decision: str
    stage: int | None
    p_beat: float | None
    incumbent: float | None
    incumbent_hash: str | None
    audit: bool
    trusted_as: str
    carried: bool
    spare: bool
    probation: bool
    trust_source: str


class Outcome(BaseModel):
    """What a run decided and what it came to."""

    decisions: list[Decision]
    ledger: list[tuple[str, str, str, float | None]]  # (candidate, phase, status, speedup) in the order bought
    results: dict[str, Any]  # the run's result, less what names the run or the store


class Recording(BaseModel):
    """One recorded run: its configuration, device, probes and measurements; a session's submissions; and what
    the replay with the recording's code decided."""

    name: str
    kind: Literal["run", "session"]
    config: dict[str, Any]  # RunConfig without ``replay``
    device: HardwareSpec
    probes: dict[str, float] = Field(default_factory=dict)
    measurements: list[Measurement]  # every live measurement of the recorded store (the run's and the noise floor)
    commands: list[dict[str, Any]] = Field(default_factory=list)  # a session's SessionCommand dumps, in order
    live: Outcome | None = None  # the live run's own decisions (for the differences a replay cannot avoid)
    expected: Outcome | None = None  # the replay's, with the code the recording was made with


RESULT_FIELDS = ("spent", "status", "stop_reason", "best_hash", "best_speedup", "first_speedup", "confirmed",
                 "best_interval", "measurements_to_best", "considered", "considered_all", "trust", "counts",
                 "best_path", "significant")


def outcome(store: Store, run_id: str) -> Outcome:
    """A finished run's decisions, ledger and results, read from its store."""
    decisions = [Decision(candidate=e.candidate_hash or "", decision=p["decision"], stage=p.get("stage"),
                          p_beat=p.get("p_beat"), incumbent=p.get("incumbent"), incumbent_hash=p.get("incumbent_hash"),
                          audit=p.get("audit", False), trusted_as=p.get("trusted_as", ""),
                          carried=p.get("carried", False), spare=p.get("spare", False),
                          probation=p.get("probation", False), trust_source=p.get("trust_source", ""))
                 for e in store.events.find(run_id, kind="route") for p in (e.payload,)]
    ledger = [(m.candidate_hash, m.phase, m.status.value, m.speedup)
              for m in store.ledger.find(run_id=run_id, visible_to=run_id)]
    row = store.runs.get(run_id)
    assert row is not None and row.summary, f"run {run_id} has no result"
    results = {k: row.summary.get(k) for k in RESULT_FIELDS}
    results["best_interval"] = list(results["best_interval"]) if results["best_interval"] else None
    return Outcome(decisions=decisions, ledger=[tuple(x) for x in ledger], results=results)


# ---- running ---------------------------------------------------------------------------------------------
def _session(config: RunConfig, store: Store, home: Path, commands: list[dict[str, Any]], replay: str | None) -> str:
    """Drive a session's graph as the session front door does (start, each submission, finish): the graph's
    decisions are the session's; the front door only validates ids and formats results."""
    from kernelcast.session import ExternalGenerator

    config = config.model_copy(update={"replay": replay})
    task = resolve_task(config.task)
    env = RunEnv(home=home)
    with open_measurer(config, task.backend, store) as measurer:
        hardware = measurer.start()
        measurer.check_reference(task, config.sizes, env.measure_timeout_s)
        run_id = store.runs.create(task.name, hardware.key, config.model_dump(), config.budget)
        store.runs.update(run_id, folder=str(env.folder(run_id)))
        ctx = open_run(run_id, config, store, env, measurer, generator=ExternalGenerator())
        saver = checkpointer(env.checkpoints)
        try:
            app = build_session_graph(ctx).compile(checkpointer=saver)
            graph = {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}
            for _ in app.stream({"run_id": run_id}, graph, stream_mode="updates"):
                pass
            for command in commands:
                for _ in app.stream(Command(resume=command), graph, stream_mode="updates"):
                    pass
        finally:
            saver.conn.close()
    return run_id


def _run(recording: Recording, store: Store, home: Path, replay: str | None) -> str:
    config = RunConfig.model_validate({**recording.config, "replay": replay})
    if recording.kind == "session":
        return _session(config, store, home, recording.commands, replay)
    return start_run(config, store, RunEnv(home=home)).run_id


def replay(recording: Recording, folder: Path) -> Outcome:
    """Replay a recording in ``folder`` (a fresh store holding the device's probes, as the recorded one did
    before its run) and read what it decided."""
    answers = Store(folder / "recorded.db")
    answers.devices.upsert(recording.device)
    for m in recording.measurements:
        answers.ledger.add(m)
    answers.close()
    store = Store(folder / "kernelcast.db")
    store.devices.upsert(recording.device)
    for name, value in recording.probes.items():
        store.devices.set_probe(recording.device.key, name, value)
    try:
        return outcome(store, _run(recording, store, folder, str(folder / "recorded.db")))
    finally:
        store.close()


def record(name: str, kind: Literal["run", "session"], config: RunConfig, folder: Path,
           commands: list[dict[str, Any]] | None = None) -> Recording:
    """Run live in a fresh store in ``folder`` and keep what a replay needs."""
    store = Store(folder / "kernelcast.db")
    try:
        recording = Recording(name=name, kind=kind, config=config.model_dump(exclude={"replay"}),
                              device=HardwareSpec(backend="opencl", name="?"), measurements=[],
                              commands=commands or [])
        run_id = _run(recording, store, folder, None)
        row = store.runs.get(run_id)
        assert row is not None
        device = store.devices.all()[row.device]
        probes = {p: v for p in PROBES if (v := store.devices.probe(device.key, p)) is not None}
        return recording.model_copy(update={
            "device": device, "probes": probes, "measurements": store.ledger.find(device=device.key),
            "live": outcome(store, run_id)})
    finally:
        store.close()


# ---- differences ---------------------------------------------------------------------------------------------
def differences(expected: Outcome, got: Outcome) -> list[str]:
    """Where two outcomes differ, one line each (empty: identical)."""
    out = []
    for i, (a, b) in enumerate(zip(expected.decisions, got.decisions)):
        if a != b:
            changed = {k: (v, getattr(b, k)) for k, v in a.model_dump().items() if getattr(b, k) != v}
            out.append(f"decision {i} ({a.candidate[:8]}): {changed}")
    if len(expected.decisions) != len(got.decisions):
        out.append(f"{len(expected.decisions)} decisions expected, {len(got.decisions)} made")
    if expected.ledger != got.ledger:
        out.append(f"ledger: expected {expected.ledger}, got {got.ledger}")
    for key, value in expected.results.items():
        if got.results.get(key) != value:
            out.append(f"result {key}: expected {value!r}, got {got.results.get(key)!r}")
    return out


def live_differences(recording: Recording) -> list[str]:
    """Where the replay with the recording's code differs from the live run it replays."""
    assert recording.live is not None and recording.expected is not None
    return differences(recording.live, recording.expected)


# ---- the stored recordings -------------------------------------------------------------------------------------
def load(path: Path) -> list[Recording]:
    with gzip.open(path, "rt") as f:
        return [Recording.model_validate(r) for r in json.load(f)]


def save(path: Path, recordings: list[Recording]) -> None:
    data = [r.model_dump(mode="json", exclude_none=False) for r in recordings]
    with gzip.open(path, "wt", compresslevel=9) as f:
        json.dump(data, f, separators=(",", ":"))


def saxpy_points(n: int, skip: int = 0) -> list[dict[str, Any]]:
    """``n`` valid template points of saxpy as submissions (what a session's caller submits)."""
    task = resolve_task("saxpy")
    points = [p for p in ({"VEC": v, "COARSEN": c, "WG": w} for v in (1, 2, 4, 8) for c in (1, 2, 4, 8)
                          for w in (16, 64, 256)) if task.is_valid_point(p)]
    out = []
    for params in points[skip:skip + n]:
        cand = task.instantiate(params)
        out.append({"source": cand.source, "global_size": cand.global_size, "local_size": cand.local_size,
                    "intent": cand.intent, "task": "saxpy", "params": params})
    return out


def plans() -> list[tuple[str, Literal["run", "session"], RunConfig, list[dict[str, Any]]]]:
    """The three recorded runs: selective and measure-all runs of the offline generator, and a session."""
    session = [SessionCommand(action="submit", candidates=saxpy_points(6)).model_dump(),
               SessionCommand(action="submit", candidates=saxpy_points(6, skip=6)).model_dump(),
               SessionCommand(action="finish").model_dump()]
    return [
        # a bound on rounds: a replay answers the incumbent's confirmation with its first measurement, so it leaves the
        # live run's path and, without it, carries ever more unmeasurable children through 4 x budget rounds
        ("selective", "run", RunConfig(task="gemv", budget=10, sizes="small", seed=3, max_rounds=6), []),
        ("measure-all", "run", RunConfig(task="stencil2d", budget=8, sizes="small", router="measure-all", seed=1), []),
        ("session", "session", RunConfig(task="saxpy", budget=8, sizes="small", generator=EXTERNAL, seed=2), session),
    ]


@contextmanager
def _folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="replay-check-") as tmp:
        yield Path(tmp)


def main(argv: list[str]) -> None:
    """``record PATH``: record the three runs live and replay each (the expected outcome); ``expect PATH``:
    replay the stored recordings again with this code and store that as expected; ``check PATH``: compare."""
    what, path = argv[0], Path(argv[1])
    if what == "record":
        recordings = []
        for name, kind, config, commands in plans():
            with _folder() as folder:
                recordings.append(record(name, kind, config, folder, commands))
            print(f"recorded {name}: {len(recordings[-1].measurements)} measurements", flush=True)
        save(path, recordings)
        what = "expect"
    recordings = load(path)
    for i, rec in enumerate(recordings):
        with _folder() as folder:
            got = replay(rec, folder)
        if what == "expect":
            recordings[i] = rec.model_copy(update={"expected": got})
            print(f"{rec.name}: {len(got.decisions)} decisions; differs from the live run in: "
                  f"{live_differences(recordings[i]) or 'nothing'}", flush=True)
        else:
            assert rec.expected is not None
            print(f"{rec.name}: {differences(rec.expected, got) or 'identical'}", flush=True)
    if what == "expect":
        save(path, recordings)


if __name__ == "__main__":
    main(sys.argv[1:])
