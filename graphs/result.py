"""The final answer of a run: always a measured kernel, with the path that led to it."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from kernelcast.graphs.state import NodeRecord, SearchState, outcome_counts
from kernelcast.tools.store import Store


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
    best_path: list[str] = Field(default_factory=list, description="intents from the reference to the best")
    best_geometry: dict[str, list[str] | None] = Field(default_factory=dict)
    measurements_to_best: int = 0
    considered: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    folder: str = ""

    @property
    def considered_per_measurement(self) -> float:
        return self.considered / self.spent if self.spent else float("inf")


def path_to(nodes: dict[str, NodeRecord], key: str) -> list[str]:
    chain = []
    cursor: str | None = key
    while cursor is not None and cursor in nodes:
        chain.append(cursor)
        cursor = nodes[cursor]["parent"]
    return list(reversed(chain))


def build_result(state: SearchState, store: Store, run_id: str, task: str, device: str, router: str, budget: int,
                 folder: Path, status: str) -> RunResult:
    nodes = state["nodes"]
    counts = outcome_counts(nodes)
    measured = [n for n in nodes.values() if n["outcome"] in ("measured", "verified") and n["speedup"]]
    best = max(measured, key=lambda n: n["speedup"] or 0.0) if measured else None
    result = RunResult(run_id=run_id, task=task, device=device, router=router, budget=budget,
                       spent=store.measurement_totals(run_id)[0], status=status,
                       stop_reason=state.get("stop_reason", ""), considered=len(nodes) - 1, counts=counts,
                       measurements_to_best=state.get("measurements_to_best", 0), folder=str(folder))
    if best is not None:
        cand = store.candidate(best["hash"])
        result.best_hash = best["hash"]
        result.best_speedup = best["speedup"]
        result.best_cv = best["cv"]
        result.best_intent = best["intent"]
        result.best_path = [nodes[k]["intent"] for k in path_to(nodes, best["hash"])]
        if cand is not None:
            result.best_geometry = {"global": cand.global_size, "local": cand.local_size,
                                    "options": cand.build_options}
    return result


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
             f"candidates considered {result.considered}", ""]
    if result.best_hash:
        lines += [f"best measured speedup: **{result.best_speedup:.3f}x** (CV {result.best_cv or 0:.1%}), "
                  f"candidate `{result.best_hash}`, reached after {result.measurements_to_best} measurements", "",
                  "path of mutations:", *[f"{i}. {step}" for i, step in enumerate(result.best_path)]]
    else:
        lines.append("no candidate was measured correct: the reference stays the best kernel")
    (folder / "README.md").write_text("\n".join(lines) + "\n")
