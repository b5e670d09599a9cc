"""The final answer of a run: the best measured kernel when it beats the reference significantly, else the
reference itself at 1.0x (the floor of every answer), with the path that led to it and the best measured
candidate named beside it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, computed_field

from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.events import Spend
from kernelcast.graphs.route.forecast_skill import ForecastSkill, forecast_skill
from kernelcast.graphs.route.forecast_spread import ForecastSpread, predicted_log_speedup
from kernelcast.graphs.route.routers.selective import SelectiveRouter
from kernelcast.graphs.route.trust import trust_summary
from kernelcast.graphs.search.roofline import RooflineVerdict, run_task, verdict_of
from kernelcast.graphs.search.tree import NodeRecord, SearchState, Standing, outcome_counts
from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.records import RunRecord
from kernelcast.tools.store.store import Store


def interval_text(interval: tuple[float, float] | None) -> str:
    """A speedup interval as people read it: "15.41x-15.95x" (two decimals, three below 1x)."""
    if interval is None:
        return ""
    low, high = interval
    digits = 2 if low >= 1.0 else 3
    return f"{low:.{digits}f}x-{high:.{digits}f}x"


class ShownSpeedup(BaseModel):
    """The speedup of one node of a run as every output shows it (summary, ``show``, report, tree, top kernels,
    compare, examples, MCP, chat): its confirmation, with the interval, once it has one; else its first
    measurement, labelled as such. Built by :func:`shown_speedups` only."""

    candidate_hash: str
    speedup: float = Field(description="the confirmation's speedup when confirmed, else the first measurement's")
    interval: tuple[float, float] | None = Field(None, description="95 % bootstrap interval of ``speedup``")
    confirmed: bool = False
    first: float = Field(description="the speedup of the node's first (search or verify) measurement")
    first_interval: tuple[float, float] | None = None
    cv: float | None = Field(None, description="coefficient of variation of the first measurement's timings")
    found_at: int = Field(description="measurements of the run spent up to and including the first one of it")

    @property
    def standing(self) -> Standing:
        """The node's :class:`~kernelcast.graphs.search.tree.Standing`: the one rule for "best"."""
        return Standing(self.speedup, self.confirmed)

    @property
    def rank(self) -> tuple[bool, float]:
        """Order of the top (:attr:`Standing.rank`): confirmed nodes first (by their confirmation), then first
        measurements. The best of a run is the node with the highest rank: its headline, star, first row and
        curve end agree."""
        return self.standing.rank

    @property
    def label(self) -> str:
        return "confirmed" if self.confirmed else "first measurement"

    def text(self) -> str:
        """"15.683x confirmed (95 % 15.41x-15.95x; first measurement 30.746x)" or "30.746x (first measurement,
        not confirmed)"."""
        if not self.confirmed:
            return f"{self.speedup:.3f}x (first measurement, not confirmed)"
        interval = f"95 % {interval_text(self.interval)}; " if self.interval else ""
        return f"{self.speedup:.3f}x confirmed ({interval}first measurement {self.first:.3f}x)"

    def short(self) -> str:
        """For charts and narrow columns: "15.68x (confirmed)" or "30.75x (1st measurement)"."""
        return f"{self.speedup:.2f}x ({'confirmed' if self.confirmed else '1st measurement'})"


def shown_speedups(ledger: Iterable[Measurement]) -> dict[str, ShownSpeedup]:
    """The shown speedup of every node a run's ledger (its measurements, in the order bought) holds a correct
    measurement of: the one definition every output uses. A node's last confirmation decides (a failed one
    leaves it without a speedup, as the search marks it failed); its search/verify measurement is the first;
    a node never measured correct has none."""
    first: dict[str, tuple[Measurement, int]] = {}
    confirmation: dict[str, Measurement] = {}
    spent = 0
    for m in ledger:
        if m.phase == "noise":  # a harness calibration, not charged to the budget
            continue
        spent += m.provenance != "reused"  # a session's copy of an earlier run's measurement costs it nothing
        if m.phase == "confirm":
            confirmation[m.candidate_hash] = m
        else:
            first[m.candidate_hash] = (m, spent)
    out = {}
    for key, (m, spent) in first.items():
        again = confirmation.get(key)
        if not m.ok or m.speedup is None or (again is not None and (not again.ok or again.speedup is None)):
            continue
        cv = m.candidate.cv if m.candidate else None
        if again is not None:
            assert again.speedup is not None
            out[key] = ShownSpeedup(candidate_hash=key, speedup=again.speedup, interval=again.speedup_ci,
                                    confirmed=True, first=m.speedup, first_interval=m.speedup_ci, cv=cv,
                                    found_at=spent)
        else:
            out[key] = ShownSpeedup(candidate_hash=key, speedup=m.speedup, interval=m.speedup_ci, first=m.speedup,
                                    first_interval=m.speedup_ci, cv=cv, found_at=spent)
    return out


def ranked(shown: Mapping[str, ShownSpeedup]) -> list[ShownSpeedup]:
    """The nodes best first (:attr:`ShownSpeedup.rank`)."""
    return sorted(shown.values(), key=lambda s: s.rank, reverse=True)


def plural(n: int, word: str) -> str:
    """"1 measurement", "2 measurements"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Answer(BaseModel):
    """What a run delivers (``best.cl``, ``runs``, ``show``, reports, MCP, sessions): its best candidate when that
    beats the reference significantly, else the reference itself at 1.0x; the best measured candidate, when it is
    not the answer, is named beside it (:attr:`candidate`). Built by :func:`answer_of` only."""

    kernel: Literal["candidate", "reference"]
    candidate_hash: str | None = Field(description="the delivered kernel's hash (the reference's; None: unknown)")
    speedup: float = Field(description="the delivered kernel's speedup: 1.0 for the reference")
    candidate: ShownSpeedup | None = Field(None, description="the best measured candidate (None: none correct)")
    why: str = Field("", description="why this kernel: the verdict on the best measured candidate")

    @property
    def is_reference(self) -> bool:
        return self.kernel == "reference"

    def headline(self) -> str:
        """"15.683x confirmed (95 % ...)" or "the reference (1.000x)"."""
        if self.is_reference or self.candidate is None:
            return "the reference (1.000x)"
        return self.candidate.text()

    def measured_text(self) -> str:
        """The best measured candidate, for an answer that is the reference ("" otherwise, or when none was)."""
        if not self.is_reference or self.candidate is None:
            return ""
        return f"{self.candidate.candidate_hash[:8]} at {self.candidate.text()}"

    def text(self) -> str:
        """One line: what is delivered and why; with the best measured candidate when the reference is delivered."""
        if not self.is_reference:
            return f"{self.headline()}: {self.why}" if self.why else self.headline()
        measured = self.measured_text()
        return (f"the reference (1.000x): {self.why}"
                + (f"; best measured candidate {measured}" if measured else ""))


def answer_of(best: ShownSpeedup | None, significant: bool, reference_hash: str | None, why: str = "") -> Answer:
    """The one rule for what is delivered: ``best`` when ``significant`` (it beats the reference beyond its interval
    and the noise floor), else the reference at 1.0x."""
    if best is not None and significant:
        return Answer(kernel="candidate", candidate_hash=best.candidate_hash, speedup=best.speedup, candidate=best,
                      why=why)
    return Answer(kernel="reference", candidate_hash=reference_hash, speedup=1.0, candidate=best,
                  why=why)


def provisional_answer(best: ShownSpeedup | None, reference_hash: str | None) -> Answer:
    """The answer of a run still going (a session between rounds): before the final confirmation and noise floor,
    a candidate is delivered when its 95 % interval lies above 1.0 (a point value above 1.0 without an interval does
    not count)."""
    low = best.interval[0] if best is not None and best.interval else None
    beats = low is not None and low > 1.0
    why = ("" if best is None else "its 95 % interval lies above 1.0 (not final: no confirmation yet)"
           if beats and not best.confirmed else "its 95 % interval lies above 1.0" if beats
           else "no candidate beats it significantly yet")
    return answer_of(best, beats, reference_hash, why or "no correct candidate was measured")


def best_curve(ledger: Sequence[Measurement]) -> list[tuple[int, ShownSpeedup | None]]:
    """(measurements spent, the best of the nodes found by then) after each measurement of the ledger, every
    node valued as the run shows it at the end (its confirmation where it has one): a curve that rises where
    the search found what it reports, never to a first measurement its confirmation took back, and ends on
    the run's best. Nondecreasing in :attr:`ShownSpeedup.rank`."""
    final = shown_speedups(ledger)
    curve = []
    for spent in range(1, len(ledger) + 1):
        top = ranked({k: v for k, v in final.items() if v.found_at <= spent})
        curve.append((spent, top[0] if top else None))
    return curve


def spend_text(event: Spend, candidate: str | None) -> str:
    """One bought measurement as progress lines show it: a search measurement is labelled a first
    measurement, a confirmation a confirmation, so a later, lower confirmed best does not read as a contradiction."""
    which = "confirmation" if event.phase == "confirm" else "first measurement"
    speed = f" {event.speedup:.3f}x ({which})" if event.speedup else ""
    paired = f", {event.over_incumbent:.3f}x the incumbent beside it" if event.over_incumbent else ""
    return f"measured {(candidate or '')[:8]} ({event.phase}): {event.status}{speed}{paired}"


class RunResult(BaseModel):
    run_id: str
    task: str
    device: str
    router: str
    budget: int
    spent: int
    status: str
    stop_reason: str = ""
    best_hash: str | None = Field(None, description="the best measured candidate (delivered only when ``answer`` says "
                                  "so: the reference is the floor)")
    best_speedup: float | None = Field(None, description="the best measured candidate's speedup (see ``answer``)")
    reference_hash: str | None = Field(None, description="the reference kernel's hash (None: a run stored before "
                                       "this field)")
    best_cv: float | None = None
    best_intent: str = ""
    best: ShownSpeedup | None = Field(None, description="the best node's shown speedup (None: none, or a run "
                                                      "stored before this field)")
    first_speedup: float | None = Field(None, description="the best's speedup when it was first measured")
    confirmed: bool = Field(False, description="best_speedup comes from a confirmation re-measurement")
    best_interval: tuple[float, float] | None = Field(None, description="95 % bootstrap interval of best_speedup")
    noise_floor: float | None = Field(None, description="relative spread of the reference measured against itself")
    significant: bool = False
    verdict: str = ""
    replayed_from: str | None = Field(None, description="the store a replay answered from: every number is a stored "
                                      "one, none measured now (None: a live run)")
    best_path: list[str] = Field(default_factory=list, description="intents from the reference to the best")
    best_geometry: dict[str, list[str] | None] = Field(default_factory=dict)
    measurements_to_best: int = Field(0, description="measurements spent up to the first measurement of the best")
    considered: int = 0  # candidates with a forecast that did not fail, or a measurement
    considered_all: int = 0  # every candidate the router saw (forecast failed or not)
    trust: str = Field("", description="forecasts given and their spread within rounds, trusted decisions, audits, "
                       "measured false prunes")
    forecast_spread: ForecastSpread | None = Field(None, description="spread of predicted ln S within each routed "
                                                   "round: how far the forecasts told candidates apart (None: a run "
                                                   "stored before this field)")
    forecast_skill: ForecastSkill | None = Field(None, description="how well the run's forecasts ranked the children "
                                                 "it measured (None: a run stored before this field)")
    roofline: RooflineVerdict | None = Field(None, description="the reference's and the best's GFLOP/s and GB/s "
                                             "against the device's probed peaks (None: never timed, or a run stored "
                                             "before this field)")
    counts: dict[str, int] = Field(default_factory=dict)
    folder: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def answer(self) -> Answer:
        """What the run delivers (:func:`answer_of`): the best candidate when its measurement beats the reference
        significantly (a replay's stored rows count: its ``significant`` is False because nothing was measured
        now, not because the rows say the reference is faster), else the reference at 1.0x."""
        found = judgement(self)
        best = self.best or self.legacy_best()
        why = found.reason if found.significant else f"no significant speedup ({found.reason})"
        if best is None:
            why = found.reason
        if self.replayed_from is not None:
            why += f" in the stored rows (replayed from {self.replayed_from}, nothing measured now)"
        return answer_of(best, found.significant and best is not None, self.reference_hash, why)

    def answer_with(self, best: ShownSpeedup | None) -> Answer:
        """:attr:`answer` with the best measured candidate as the store shows it now (``best``: that node's shown
        speedup; None or another node's: the result's own)."""
        if best is None or best.candidate_hash != self.best_hash:
            return self.answer
        return self.model_copy(update={"best": best}).answer

    def legacy_best(self) -> ShownSpeedup | None:
        """The best measured candidate of a run stored before ``best`` was kept, from its other fields."""
        if self.best_hash is None or self.best_speedup is None:
            return None
        return ShownSpeedup(candidate_hash=self.best_hash, speedup=self.best_speedup, interval=self.best_interval,
                            confirmed=self.confirmed, first=self.first_speedup or self.best_speedup,
                            cv=self.best_cv, found_at=self.measurements_to_best)

    @property
    def considered_per_measurement(self) -> float:
        return self.considered / self.spent if self.spent else float("inf")

    @classmethod
    def of_run(cls, run: RunRecord) -> RunResult | None:
        """A stored run's result, once it has finished (None before): the one reader of ``RunRecord.summary``."""
        return cls.model_validate(run.summary) if run.summary else None


def run_skill(store: Store, run_id: str) -> ForecastSkill:
    """The rank skill of a run's forecasts on the children it measured: each child's shown speedup (its
    confirmation where it has one; none where that failed) against the run's last forecast of it, the one its
    routing read (a child is forecast again only while it waits unmeasured, so that forecast preceded the
    measurement)."""
    shown = shown_speedups(store.ledger.find(run_id=run_id))
    return forecast_skill([(predicted_log_speedup(record), math.log(shown[key].speedup))
                           for key, record in store.forecasts.latest(run_id).items()
                           if key in shown and not record.failed and shown[key].speedup > 0])


def run_best(store: Store, run_id: str, nodes: Mapping[str, NodeRecord]) -> ShownSpeedup | None:
    """The run's best measured candidate by the one rule (:attr:`Standing.rank`: confirmed first), among the tree's
    correct measured nodes (None: none yet): what results, sessions, ``show`` and reports name as its best."""
    shown = {k: v for k, v in shown_speedups(store.ledger.find(run_id=run_id)).items()
             if k in nodes and nodes[k]["outcome"] in ("measured", "verified")}
    return next(iter(ranked(shown)), None)


def reference_of(nodes: Mapping[str, NodeRecord]) -> str | None:
    """The tree's root: the reference kernel's hash (None: an empty tree)."""
    return next((k for k, n in nodes.items() if n["parent"] is None), None)


def run_answer(store: Store, run_id: str, nodes: Mapping[str, NodeRecord]) -> Answer:
    """What a run still going delivers now (:func:`provisional_answer` of :func:`run_best`): for a session between
    rounds; a finished run's is :attr:`RunResult.answer`."""
    return provisional_answer(run_best(store, run_id, nodes), reference_of(nodes))


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
    best = run_best(store, run_id, nodes)
    result = RunResult(run_id=run_id, task=task, device=device, router=router, budget=budget,
                       spent=store.ledger.totals(run_id)[0], status=status,
                       stop_reason=state.get("stop_reason", ""), considered_all=len(nodes) - 1, counts=counts,
                       folder=str(folder))
    trust = trust_summary(store, run_id, ctx.config.risk)
    skill = run_skill(store, run_id)
    result.considered, result.forecast_spread, result.forecast_skill = trust.considered, trust.spread, skill
    result.trust = f"{trust.line()}; {skill.text()}"
    if isinstance(ctx.router, SelectiveRouter) and ctx.router.follow_skill:  # RunConfig.follow_skill
        result.trust += f"; {ctx.router.regime_text()}"
    result.replayed_from = ctx.config.replay
    result.reference_hash = reference_of(nodes)
    if best is not None:
        key = best.candidate_hash
        cand = store.candidates.get(key)
        result.best_hash, result.best = key, best
        result.first_speedup = best.first
        result.best_speedup = best.speedup
        result.confirmed = best.confirmed
        result.best_interval = best.interval if best.confirmed else None
        result.measurements_to_best = best.found_at
        result.noise_floor = noise_floor(store, ctx.task, device, run_id)
        result.significant, result.verdict = judge(result)
        result.best_cv = best.cv
        result.best_intent = nodes[key]["intent"]
        result.best_path = [nodes[k]["intent"] for k in path_to(nodes, key)]
        if cand is not None:
            result.best_geometry = {"global": cand.global_size, "local": cand.local_size,
                                    "options": cand.build_options}
    result.roofline = verdict_of(ctx.task, ctx.hardware, store, store.ledger.find(run_id=run_id), result.best_hash)
    return result


def run_roofline(store: Store, run: RunRecord) -> RooflineVerdict | None:
    """A stored run's roofline verdict: the one its summary keeps, else computed now from its ledger (a run
    finished before verdicts were kept, or not finished; None: its task file is gone or changed, its device
    unknown, or nothing was timed)."""
    result = RunResult.of_run(run)
    if result is not None and result.roofline is not None:
        return result.roofline
    found = run_task(store, run)
    if found is None:
        return None
    ledger = store.ledger.find(run_id=run.id)
    best = next(iter(ranked(shown_speedups(ledger))), None)
    return verdict_of(*found, store, ledger, best.candidate_hash if best is not None else None)


def noise_floor(store: Store, task: Task, device: str, run_id: str) -> float | None:
    """Relative noise of this task's reference on this device: max(|1 - S|, half the interval) of the
    reference measured against itself (stored by the verify step)."""
    run = store.runs.get(run_id)
    sizes = RunConfig.of_run(run).sizes if run is not None else "full"
    rows = [m for m in store.ledger.find(task=task.name, device=device, fingerprint=task.fingerprint)
            if m.phase == "noise" and m.sizes == sizes and m.ok]
    if not rows or rows[-1].speedup is None:
        return None
    m = rows[-1]
    assert m.speedup is not None
    low, high = m.speedup_ci or (m.speedup, m.speedup)
    return max(abs(1.0 - m.speedup), (high - low) / 2)


def judge(result: RunResult) -> tuple[bool, str]:
    """Is the reported speedup distinguishable from noise? A replay's is never a live one: its numbers are a store's,
    whose rows anybody may have edited, so its verdict says it was replayed and what the rows say."""
    significant, verdict = judge_measured(result)
    if result.replayed_from is None:
        return significant, verdict
    return False, f"replayed from {result.replayed_from}, nothing measured now; the stored rows say: {verdict}"


class Judgement(BaseModel):
    """Whether a run's best measured candidate beats the reference: ``text`` with its numbers (the verdict),
    ``reason`` in words only (beside a number that is already shown)."""

    significant: bool
    text: str
    reason: str


def judgement(result: RunResult) -> Judgement:
    """Is the measured speedup distinguishable from noise? (interval excludes 1.0, outside the noise floor)"""
    speed = result.best_speedup
    if speed is None:
        return Judgement(significant=False, text="no correct candidate was measured",
                         reason="no correct candidate was measured")
    if not result.confirmed:
        why = "not confirmed (no budget left to re-measure it)"
        return Judgement(significant=False, text=why, reason=why)
    low, high = result.best_interval or (speed, speed)
    if high < 1.0:
        return Judgement(significant=False, reason="slower than the reference",
                         text=f"no speedup: the best candidate is slower than the reference ({speed:.3f}x, 95 % "
                              f"interval {interval_text((low, high))})")
    if low <= 1.0 or speed <= 1.0:
        return Judgement(significant=False, reason="its 95 % interval contains 1.0",
                         text=f"no significant speedup: the 95 % interval {interval_text((low, high))} contains 1.0")
    floor = result.noise_floor or 0.0
    if speed <= 1.0 + floor:
        return Judgement(significant=False, reason=f"inside this device's noise floor (+-{floor:.1%})",
                         text=f"no significant speedup: {speed:.3f}x is inside this device's noise floor "
                              f"(+-{floor:.1%})")
    return Judgement(significant=True, reason="significant speedup",
                     text=f"significant speedup: {speed:.3f}x (95 % interval {interval_text((low, high))})")


def judge_measured(result: RunResult) -> tuple[bool, str]:
    """Is the measured speedup distinguishable from noise? (:func:`judgement`)"""
    found = judgement(result)
    return found.significant, found.text


def write_run_folder(result: RunResult, state: SearchState, store: Store, language: str) -> None:
    """The run folder: ``result.json``, ``tree.json``, ``best.cl`` (the answer: the reference when no candidate beat
    it significantly; then the best measured candidate is ``best_measured.cl``) and a ``README.md``."""
    folder = Path(result.folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(result.model_dump_json(indent=2))
    (folder / "tree.json").write_text(json.dumps(state["nodes"], indent=1))
    answer = result.answer
    ext = ".cu" if language == "cuda" else ".cl"
    kernels = {"best": answer.candidate_hash}
    if answer.is_reference and result.best_hash:
        kernels["best_measured"] = result.best_hash
    for name, key in kernels.items():
        cand = store.candidates.get(key) if key else None
        if cand is not None:
            (folder / f"{name}{ext}").write_text(cand.source)
            (folder / f"{name}.json").write_text(cand.model_dump_json(indent=2))
    lines = [f"# run {result.run_id}: {result.task} on {result.device}", "",
             f"router {result.router}, budget {result.budget}, spent {result.spent}, "
             f"candidates considered {result.considered} (of {result.considered_all} proposed)", "",
             result.stop_reason, "", result.trust, ""]
    if result.roofline is not None:
        lines += [f"roofline: {result.roofline.text}", ""]
    if answer.is_reference:
        lines += [f"answer: **the reference (1.000x)**, in `best{ext}`: {answer.why}", ""]
        if result.best_hash and answer.candidate is not None:
            lines += [f"best measured candidate: `{result.best_hash}` at {answer.candidate.text()}, in "
                      f"`best_measured{ext}`, first measured after {plural(result.measurements_to_best, 'measurement')}",
                      "", "its path of mutations:", *[f"{i}. {step}" for i, step in enumerate(result.best_path)]]
    else:
        lines += [f"answer: **{result.best_speedup:.3f}x** ({result.verdict}); first measured "
                  f"{result.first_speedup or 0:.3f}x, candidate `{result.best_hash}`, first measured after "
                  f"{plural(result.measurements_to_best, 'measurement')}", "",
                  "path of mutations:", *[f"{i}. {step}" for i, step in enumerate(result.best_path)]]
    (folder / "README.md").write_text("\n".join(lines) + "\n")
