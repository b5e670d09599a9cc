"""The final answer of a run: always a measured kernel, with the path that led to it."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.state import NodeRecord, SearchState, outcome_counts
from kernelcast.graphs.trust import trust_summary
from kernelcast.tools.records import RunRecord
from kernelcast.tools.store import Store
from kernelcast.tools.task import Task


class RunResult(BaseModel):
    run_id: str
    task: str
    device: str
    router: str
    budget: int
    spent: int
    status: str
    stop_reason: str = ""
    best_hash: str | None = None
    best_speedup: float | None = None
    best_cv: float | None = None
    best_intent: str = ""
    first_speedup: float | None = Field(None, description="the best's speedup when it was first measured")
    confirmed: bool = Field(False, description="best_speedup comes from a confirmation re-measurement")
    best_interval: tuple[float, float] | None = Field(None, description="95 % bootstrap interval of best_speedup")
    noise_floor: float | None = Field(None, description="relative spread of the reference measured against itself")
    significant: bool = False
    verdict: str = ""
    best_path: list[str] = Field(default_factory=list, description="intents from the reference to the best")
    best_geometry: dict[str, list[str] | None] = Field(default_factory=dict)
    measurements_to_best: int = 0
    considered: int = 0  # candidates with an informative forecast or a measurement
    considered_all: int = 0  # every candidate the router saw (forecast failed or not)
    trust: str = Field("", description="informative forecasts, trusted decisions, audits, measured false prunes")
    counts: dict[str, int] = Field(default_factory=dict)
    folder: str = ""

    @property
    def considered_per_measurement(self) -> float:
        return self.considered / self.spent if self.spent else float("inf")

    @classmethod
    def of_run(cls, run: RunRecord) -> RunResult | None:
        """A stored run's result, once it has finished (None before): the one reader of ``RunRecord.summary``."""
        return cls.model_validate(run.summary) if run.summary else None


def path_to(nodes: dict[str, NodeRecord], key: str) -> list[str]:
    chain = []
    cursor: str | None = key
    while cursor is not None and cursor in nodes:
        chain.append(cursor)
        cursor = nodes[cursor]["parent"]
    return list(reversed(chain))


def build_result(state: SearchState, ctx: RunContext, status: str) -> RunResult:
    store, run_id, task, device = ctx.store, ctx.run_id, ctx.task.name, ctx.hardware.key
    router, budget, folder = ctx.config.router, ctx.config.budget, ctx.folder
    nodes = state["nodes"]
    counts = outcome_counts(nodes)
    measured = [n for n in nodes.values() if n["outcome"] in ("measured", "verified") and n["speedup"]]
    confirmed = [n for n in measured if n.get("confirmed")]
    best = (max(confirmed, key=lambda n: n.get("confirmed") or 0.0) if confirmed else
            max(measured, key=lambda n: n["speedup"] or 0.0) if measured else None)
    result = RunResult(run_id=run_id, task=task, device=device, router=router, budget=budget,
                       spent=store.measurement_totals(run_id)[0], status=status,
                       stop_reason=state.get("stop_reason", ""), considered_all=len(nodes) - 1, counts=counts,
                       measurements_to_best=state.get("measurements_to_best", 0), folder=str(folder))
    trust = trust_summary(store, run_id, ctx.config.risk)
    result.considered, result.trust = trust.considered, trust.line()
    if best is not None:
        cand = store.candidate(best["hash"])
        result.best_hash = best["hash"]
        result.first_speedup = best["speedup"]
        result.best_speedup = best.get("confirmed") or best["speedup"]
        result.confirmed = bool(best.get("confirmed"))
        interval = best.get("confirmed_ci")
        result.best_interval = (interval[0], interval[1]) if interval else None
        result.noise_floor = noise_floor(store, ctx.task, device, run_id)
        result.significant, result.verdict = judge(result)
        result.best_cv = best["cv"]
        result.best_intent = best["intent"]
        result.best_path = [nodes[k]["intent"] for k in path_to(nodes, best["hash"])]
        if cand is not None:
            result.best_geometry = {"global": cand.global_size, "local": cand.local_size,
                                    "options": cand.build_options}
    return result


def noise_floor(store: Store, task: Task, device: str, run_id: str) -> float | None:
    """Relative noise of this task's reference on this device: max(|1 - S|, half the interval) of the
    reference measured against itself (stored by the verify step)."""
    run = store.run(run_id)
    sizes = RunConfig.of_run(run).sizes if run is not None else "full"
    rows = [m for m in store.measurements(task=task.name, device=device, fingerprint=task.fingerprint)
            if m.phase == "noise" and m.sizes == sizes and m.ok]
    if not rows or rows[-1].speedup is None:
        return None
    m = rows[-1]
    assert m.speedup is not None
    low, high = m.speedup_ci or (m.speedup, m.speedup)
    return max(abs(1.0 - m.speedup), (high - low) / 2)


def judge(result: RunResult) -> tuple[bool, str]:
    """Is the reported speedup distinguishable from noise? (interval excludes 1.0, outside the noise floor)"""
    speed = result.best_speedup
    if speed is None:
        return False, "no correct candidate was measured"
    if not result.confirmed:
        return False, "not confirmed (no budget left to re-measure it)"
    low, high = result.best_interval or (speed, speed)
    if high < 1.0:
        return False, (f"no speedup: the best candidate is slower than the reference ({speed:.3f}x, 95 % interval "
                       f"{low:.3f}x-{high:.3f}x)")
    if low <= 1.0 or speed <= 1.0:
        return False, f"no significant speedup: the 95 % interval {low:.3f}x-{high:.3f}x contains 1.0"
    floor = result.noise_floor or 0.0
    if speed <= 1.0 + floor:
        return False, f"no significant speedup: {speed:.3f}x is inside this device's noise floor (+-{floor:.1%})"
    return True, f"significant speedup: {speed:.3f}x (95 % interval {low:.3f}x-{high:.3f}x)"


def write_run_folder(result: RunResult, state: SearchState, store: Store, language: str) -> None:
    folder = Path(result.folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(result.model_dump_json(indent=2))
    (folder / "tree.json").write_text(json.dumps(state["nodes"], indent=1))
    if result.best_hash:
        cand = store.candidate(result.best_hash)
        if cand is not None:
            ext = ".cu" if language == "cuda" else ".cl"
            (folder / f"best{ext}").write_text(cand.source)
            (folder / "best.json").write_text(cand.model_dump_json(indent=2))
    lines = [f"# run {result.run_id}: {result.task} on {result.device}", "",
             f"router {result.router}, budget {result.budget}, spent {result.spent}, "
             f"candidates considered {result.considered} (of {result.considered_all} proposed)", "",
             result.stop_reason, "", result.trust, ""]
    if result.best_hash:
        lines += [f"best speedup: **{result.best_speedup:.3f}x** ({result.verdict}); first measured "
                  f"{result.first_speedup or 0:.3f}x, candidate `{result.best_hash}`, reached after "
                  f"{result.measurements_to_best} measurements", "",
                  "path of mutations:", *[f"{i}. {step}" for i, step in enumerate(result.best_path)]]
    else:
        lines.append("no candidate was measured correct: the reference stays the best kernel")
    (folder / "README.md").write_text("\n".join(lines) + "\n")
