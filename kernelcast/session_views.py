"""What a session tells its caller: typed views of its tree, its rounds and its result.

Built from the checkpointed state and the store only (never from a live context), so a finished session
reads the same as an open one. Every front door returns these models; ``text()`` renders them for people
and chat models.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from kernelcast.graphs.search.result import Answer, RunResult, ShownSpeedup, shown_speedups
from kernelcast.graphs.search.session_graph import Verdict
from kernelcast.graphs.search.tree import standing
from kernelcast.tools.core.bins import BIN_NAMES
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.store.store import Store

if TYPE_CHECKING:
    from kernelcast.graphs.search.session_graph import SessionState
    from kernelcast.graphs.search.tree import ForecastSummary

Decision = Literal["measured", "reused", "trusted", "pruned", "deferred", "rejected", "pending"]
SessionPhase = Literal["awaiting_candidates", "finished", "failed"]
DECISIONS: dict[str, Decision] = {"measured": "measured", "failed": "measured", "verified": "measured",
                                  "accepted": "trusted", "pruned": "pruned", "dropped": "deferred",
                                  "pending": "pending"}


class ForecastView(BaseModel):
    probabilities: list[float] = Field(description="P(bin 1..8)")
    predicted_bin: int
    bin_name: str
    confidence: float
    expected_speedup: float
    failed: bool = Field(description="true: uninformative (the router defers it to the hardware)")


class MeasuredView(BaseModel):
    status: str = Field(description="correct, or the failure class")
    reason: str = ""
    speedup: float | None = None
    interval: tuple[float, float] | None = Field(default=None, description="95 % bootstrap interval of the speedup")
    bin: int
    bin_name: str
    candidate_ms: float | None = None
    reference_ms: float | None = None
    phase: str = "search"
    flags: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, m: Measurement) -> MeasuredView:
        return cls(status=m.status.value, reason=m.reason[:1500], speedup=m.speedup, interval=m.speedup_ci,
                   bin=m.bin(), bin_name=BIN_NAMES[m.bin()], phase=m.phase, flags=m.flags,
                   candidate_ms=m.candidate.median_ns / 1e6 if m.candidate else None,
                   reference_ms=m.reference.median_ns / 1e6 if m.reference else None)

    def text(self) -> str:
        if self.status != "correct":
            return f"{self.status}: {self.reason.splitlines()[0] if self.reason else ''}"
        which = "confirmation" if self.phase == "confirm" else "first measurement"
        return f"correct, {self.speedup:.3f}x ({which}; bin {self.bin} {self.bin_name})"


class CandidateResult(BaseModel):
    """What happened to one submitted candidate: validation, forecast, routing decision, measurement."""

    index: int = Field(description="position in the submission")
    hash: str | None = None
    intent: str = ""
    valid: bool
    validation: str = Field(description="how it was validated, or why it was rejected")
    rejection: str = Field(default="", description="rejection reason code (empty when valid)")
    forecast: ForecastView | None = None
    p_better: float | None = Field(default=None, description="forecast P(speedup > incumbent's)")
    incumbent: float | None = Field(default=None, description="the speedup to beat when it was routed")
    decision: Decision
    decision_reason: str = ""
    measurement: MeasuredView | None = None

    def text(self) -> str:
        head = f"#{self.index} {self.hash[:8] if self.hash else '--------'} {self.decision}"
        if not self.valid:
            return f"{head} ({self.rejection}): {self.validation}"
        p = f", P(better) {self.p_better:.2f}" if self.p_better is not None else ""
        forecast = self.forecast
        fc = f" forecast {forecast.expected_speedup:.2f}x{p};" if forecast and not forecast.failed else ""
        measured = f" measured {self.measurement.text()};" if self.measurement else ""
        return f"{head}:{fc}{measured} {self.decision_reason}".rstrip(";")


class SiblingView(BaseModel):
    hash: str
    intent: str
    outcome: str
    speedup: float | None = None
    forecast_speedup: float | None = None
    reason: str = ""


class ParentSuggestion(BaseModel):
    """A node the search wants mutated, with what a generator needs to mutate it well."""

    hash: str
    selected: bool = Field(description="the parent the search (PUCT) chose for the next round")
    intent: str
    outcome: str
    depth: int
    source: str
    global_size: list[str]
    local_size: list[str] | None
    build_options: list[str]
    params: dict[str, Any] | None = None
    speedup: float | None = None
    speedup_kind: Literal["reference", "confirmed", "measured", "forecast"] = Field(
        "reference", description="confirmed: its confirmation; measured: its first measurement; forecast: not measured")
    errors: list[str] = Field(default_factory=list, description="compile/runtime errors of it, its children and "
                                                                "the last rejected submissions to it")
    siblings: list[SiblingView] = Field(default_factory=list, description="its children already tried")

    def text(self) -> str:
        kind = "first measurement" if self.speedup_kind == "measured" else self.speedup_kind
        speed = f"{self.speedup:.3f}x ({kind})" if self.speedup else kind
        lines = [f"{'*' if self.selected else ' '} {self.hash[:8]} depth {self.depth} {self.outcome} {speed}: "
                 f"{self.intent}; {len(self.siblings)} children tried"]
        lines += [f"    error: {e.splitlines()[0][:160]}" for e in self.errors[:3]]
        return "\n".join(lines)


class Suggestions(BaseModel):
    session: str
    task: str
    parents: list[ParentSuggestion]
    hardware: HardwareSpec
    budget: int
    spent: int
    measurements_left: int = Field(description="measurements the search may still spend (the verification "
                                               "reserve excluded)")
    incumbent: float = Field(description="the speedup the next round is judged against (1.0: the reference): the "
                                         "best node's confirmation once it has one, else its first measurement")

    def text(self) -> str:
        head = (f"session {self.session} ({self.task} on {self.hardware.name}): {self.spent}/{self.budget} spent, "
                f"{self.measurements_left} left for the search, incumbent {self.incumbent:.3f}x; parents:")
        return "\n".join([head, *(p.text() for p in self.parents)])


class Delivered(BaseModel):
    """What a session delivers now, one rule for every view of it (``answer_of``): the fields a submission's result
    and a session's status share."""

    best_speedup: float | None = Field(default=None, description="the answer's speedup: 1.0 while the reference is "
                                                                 "the answer")
    best: ShownSpeedup | None = Field(default=None, description="the delivered candidate (best_speedup is its speedup), "
                                                                "confirmed or labelled a first measurement; None while "
                                                                "the reference is the answer (answer.candidate names "
                                                                "the best measured one)")
    answer: Answer | None = Field(default=None, description="what the session delivers: the reference at 1.0x "
                                                            "unless a candidate beats it significantly")


class SubmitOutput(Delivered):
    session: str
    parent: str
    results: list[CandidateResult]
    spent: int
    budget: int
    measurements_left: int

    def text(self) -> str:
        counts: dict[str, int] = {}
        for r in self.results:
            counts[r.decision] = counts.get(r.decision, 0) + 1
        head = (f"session {self.session}: {len(self.results)} candidates for {self.parent[:8]}: "
                + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                + f"; {self.spent}/{self.budget} spent, {self.measurements_left} left for the search"
                + (f"; answer {self.answer.text()}" if self.answer else
                   f"; best {self.best.text()}" if self.best else ""))
        return "\n".join([head, *(r.text() for r in self.results)])


class SessionStatus(Delivered):
    session: str
    task: str
    device: str
    state: SessionPhase
    router: str
    budget: int
    spent: int
    measurements_left: int
    submissions: int
    counts: dict[str, int] = Field(description="tree nodes by outcome (the root included)")
    best_hash: str | None = Field(default=None, description="the delivered candidate's hash (None: the reference)")
    parent: str | None = Field(default=None, description="the parent the search selected next (while awaiting)")
    last_round: list[CandidateResult] = Field(default_factory=list, description="the last submission's results")
    folder: str = ""

    def text(self) -> str:
        best = (f"answer {self.answer.text()}" if self.answer else
                f"best {self.best.text()} ({self.best_hash[:8]})" if self.best_hash and self.best else
                f"best {self.best_speedup:.3f}x ({self.best_hash[:8]})" if self.best_hash and self.best_speedup
                else "no measured improvement yet")
        return (f"session {self.session}: {self.task}, {self.state}, router {self.router}, {self.spent}/{self.budget} "
                f"spent ({self.measurements_left} left for the search), {self.submissions} submissions, {best}; "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())))


class SessionResult(BaseModel):
    """A finished session: the confirmed best (re-measured with an interval) and the report."""

    session: str
    result: RunResult = Field(description="the run's result: best, confirmed speedup and interval, verdict")
    report: str = Field(description="path of the session's report.html in its run folder, as a run's (README.md "
                                    "when the page could not be written: see report_problem)")
    readme: str = Field("", description="path of the run folder's README.md (the result in Markdown)")
    report_problem: str = Field("", description="why report.html was not written (empty when it was)")
    best_source: str | None = Field(None, description="source of the delivered kernel (``result.answer``: the "
                                                      "reference when no candidate beat it significantly)")

    def text(self) -> str:
        r = self.result
        roofline = f"\nroofline: {r.roofline.text}" if r.roofline is not None else ""
        if not r.best_hash:
            return (f"session {self.session} finished: no correct candidate was measured; report {self.report}"
                    + roofline)
        return (f"session {self.session} finished: answer {r.answer.text()}; "
                f"spent {r.spent}/{r.budget}; report {self.report}{roofline}")


# ---- built from the state and the store ---------------------------------------------------------
def delivered(answer: Answer) -> ShownSpeedup | None:
    """The ``best`` of the session views: the delivered candidate's shown speedup, None while the reference is the
    answer (the best measured candidate is ``answer.candidate``), so ``best_speedup`` (the answer's) and
    ``best.speedup`` are one value from one rule (:attr:`RunResult.answer`, :func:`run_answer`)."""
    return None if answer.is_reference else answer.candidate


def shown_best(store: Store, run_id: str, key: str | None) -> ShownSpeedup | None:
    """The shown speedup of node ``key`` of a run (None: no key, or no correct measurement of it)."""
    return shown_speedups(store.ledger.find(run_id=run_id)).get(key) if key else None


def _forecast_speedup(summary: ForecastSummary | None) -> float | None:
    return math.exp(summary["expected_log_speedup"]) if summary else None


def _forecast_view(summary: ForecastSummary | None) -> ForecastView | None:
    if not summary:
        return None
    return ForecastView(probabilities=summary["probabilities"], predicted_bin=summary["predicted_bin"],
                        bin_name=BIN_NAMES[summary["predicted_bin"]], confidence=summary["confidence"],
                        expected_speedup=math.exp(summary["expected_log_speedup"]), failed=summary["failed"])


def round_results(store: Store, run_id: str, state: SessionState) -> list[CandidateResult]:
    """The last submission's candidates, each with its verdict, forecast, routing decision and measurement."""
    nodes = state.get("nodes", {})
    routes = store.decisions.last_of_run(run_id)
    bought: dict[str, Measurement] = {}
    for m in store.ledger.find(run_id=run_id):
        if m.phase != "confirm":
            bought.setdefault(m.candidate_hash, m)
    out = []
    for raw in state.get("verdicts", []):
        verdict = Verdict.model_validate(raw)
        if not verdict.valid or verdict.hash not in nodes:
            out.append(CandidateResult(index=verdict.index, hash=verdict.hash, intent=verdict.intent, valid=False,
                                       validation=verdict.detail, rejection=verdict.reason, decision="rejected",
                                       decision_reason="rejected before forecasting: nothing spent"))
            continue
        key = str(verdict.hash)
        node = nodes[key]
        route = routes.get(key)
        decision = "reused" if verdict.reused else DECISIONS.get(node["outcome"], "pending")
        reason = verdict.detail if verdict.reused else route.reason if route else ""
        if node["outcome"] == "dropped" and node["reason"] and route and route.decision == "measure":
            reason = node["reason"]  # routed to the hardware, but the budget ran out first
        measured = bought.get(key)
        out.append(CandidateResult(index=verdict.index, hash=verdict.hash, intent=verdict.intent, valid=True,
                                   validation=verdict.detail, forecast=_forecast_view(node["forecast"]),
                                   p_better=route.p_beat if route else None,
                                   incumbent=route.incumbent if route else None, decision=decision,
                                   decision_reason=reason,
                                   measurement=MeasuredView.of(measured) if measured else None))
    return out


def parent_suggestion(store: Store, state: SessionState, key: str, selected: bool) -> ParentSuggestion:
    """A node the caller may extend, with the feedback a generator needs (from the tree and the store)."""
    nodes = state["nodes"]
    node = nodes[key]
    cand = store.candidates.get(key)
    assert cand is not None, f"candidate {key} missing from the store"
    speedup: float | None
    if node["outcome"] == "root":
        speedup, kind = 1.0, "reference"
    elif node["speedup"]:
        speedup, kind = standing(node), "confirmed" if node["confirmed"] is not None else "measured"
    else:
        speedup, kind = _forecast_speedup(node["forecast"]), "forecast"
    children = [k for k, n in nodes.items() if n["parent"] == key]
    siblings = [SiblingView(hash=k, intent=nodes[k]["intent"], outcome=nodes[k]["outcome"], speedup=nodes[k]["speedup"],
                            forecast_speedup=_forecast_speedup(nodes[k]["forecast"]), reason=nodes[k]["reason"])
                for k in children]
    errors = [f"{key[:8]}: {node['reason']}"] if node["outcome"] == "failed" and node["reason"] else []
    errors += [f"child {k[:8]} ({nodes[k]['intent']}): {nodes[k]['reason']}" for k in children
               if nodes[k]["outcome"] == "failed" and nodes[k]["reason"]]
    if state.get("round_parent") == key:
        errors += [f"rejected #{v['index']} ({v['reason']}): {v['detail']}" for v in state.get("verdicts", [])
                   if not v["valid"] and v["reason"] in ("compile_error", "signature", "kernel_name", "geometry",
                                                          "build_options", "host_code", "malformed")]
    return ParentSuggestion(hash=key, selected=selected, intent=node["intent"] or "reference", outcome=node["outcome"],
                            depth=node["depth"], source=cand.source, global_size=cand.global_size,
                            local_size=cand.local_size, build_options=cand.build_options, params=cand.params,
                            speedup=speedup, speedup_kind=kind, errors=errors, siblings=siblings)
