"""What the forecaster and router could be trusted with: the thresholds of a routing, and a run's trust summary.

Every routing decision is recorded (the store's ``decisions``, :mod:`kernelcast.tools.store.decisions`) with the
forecast's p = P(S_child > S_incumbent) and the incumbent of that moment; the measured ones are calibration rows
(:mod:`kernelcast.graphs.route.calibration_rows`). The rows of every run on a device (the current one included, so
its first measurements count) give the router its thresholds; the audited ones also give the measured false-prune
rate the summary reports beside the bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel

from kernelcast.agents.registry import forecaster_spec
from kernelcast.graphs.events import Route
from kernelcast.graphs.route.calibration_rows import (
    ForecasterKey,
    beat_incumbent,
    beat_of,
    calibration_group,
    calibration_row,
    calibration_rows,
    decision_wrong,
    device_decisions,
    forecaster_key,
    forecaster_of,
    group_of_run,
    judged_decisions,
    pair_of,
    stage_of,
    wrong_given,
)
from kernelcast.graphs.route.forecast_spread import ForecastSpread, forecast_spread
from kernelcast.graphs.route.replay_calibration import shipped_by_stage, stage_bucket
from kernelcast.graphs.route.risk_control import (
    SEED_REPLAY,
    CalibrationRow,
    TrustThresholds,
    certify_stage,
    clopper_pearson_interval,
    probation,
)
from kernelcast.graphs.search.tree import NodeRecord
from kernelcast.tools.store.store import Store

RouteRecord = Route  # the payload of a ``route`` event (older runs lack the trust fields: defaults apply)


def trust_for(store: Store, device: str, stage: int, risk: float, forecaster: ForecasterKey | tuple[str, str | None],
              replayed: bool = False,
              group: str = "", trial_group: str = "") -> TrustThresholds:
    """The thresholds for ``forecaster``'s decision at ``stage`` on ``device`` in a run on ``group``
    (:func:`calibration_group`; "" : every task's rows):
    certified on the device's own rows of the same stage bucket from runs that forecast with the same
    (forecaster, model) — another forecaster's record says nothing of this one's calibration — or (``replayed``,
    until the device has enough of them) on the seed replay its forecaster spec declares (none: no replayed
    trust), which the device's own record can refute; in both, the group's own rows alone when they are enough
    (:func:`kernelcast.graphs.route.risk_control.certify_stage`). Replayed thresholds are tried on
    ``trial_group`` (the run's own group) before they are trusted: the audits of replayed trust in its runs on
    the device decide (:func:`kernelcast.graphs.route.risk_control.probation`)."""
    bucket = stage_bucket(stage)
    rows: list[CalibrationRow] = []
    first_audits: dict[str, list[bool]] = {"prune": [], "accept": []}
    seed = forecaster_spec(forecaster[0]).seed_replay if forecaster[1] is None else None
    for run_group, record, m in device_decisions(store, device, forecaster):
        if stage_bucket(record.stage or 0) == bucket and (row := calibration_row(run_group, record, m)) is not None:
            rows.append(row)
        if (run_group == trial_group and record.audit and record.trust_source == SEED_REPLAY
                and record.trusted_as in first_audits):
            first_audits[record.trusted_as].append(wrong_given(record.trusted_as, beat_of(record, m)))
    prior = shipped_by_stage(seed).get(bucket, ()) if replayed and seed is not None else ()
    return probation(certify_stage(rows, prior, risk, group=group), first_audits)


class TrustedDecision(BaseModel):
    """A child pruned or accepted on its forecast alone, and the incumbent it was judged against."""

    kind: Literal["prune", "accept"]
    candidate_hash: str
    incumbent: float
    incumbent_hash: str | None = None  # None: the reference, or a run that did not record it
    carried: bool = False  # taken on a child carried over from an earlier round (it had several chances)

    def wrong(self, speedup: float | None) -> bool:
        return decision_wrong(self.kind, self.incumbent, speedup)


def trusted_decisions(store: Store, run_id: str) -> list[TrustedDecision]:
    """The decisions of a run that no measurement backed (audits excluded): what a check against the truth
    measures."""
    return [TrustedDecision(kind="prune" if record.decision == "prune" else "accept", candidate_hash=key,
                            incumbent=record.incumbent or 1.0, incumbent_hash=record.incumbent_hash, carried=record.carried)
            for key, record in store.decisions.last_of_run(run_id).items() if record.forecast_alone]


class AuditRate(BaseModel):
    """Audited trusted decisions of one kind and how many of them were wrong."""

    audited: int = 0
    wrong: int = 0
    interval: tuple[float, float] = (0.0, 1.0)  # 95 % Clopper-Pearson interval of the wrong share

    @property
    def rate(self) -> float | None:
        return self.wrong / self.audited if self.audited else None


class TrustSummary(BaseModel):
    """How many forecasts were given and how far they told candidates apart, and how many decisions were taken
    without a measurement."""

    forecasts: int = 0  # candidates forecast (a child carried over is forecast again each round: counted once)
    given_forecasts: int = 0  # of those, how many had a latest forecast that did not fail (not: informative)
    spread: ForecastSpread = ForecastSpread()  # how far each round's forecasts differed: informativeness, measured
    decisions: int = 0
    trusted_prunes: int = 0
    trusted_accepts: int = 0
    trusted_on_replay: int = 0  # of the trusted decisions, those certified by the seed's replayed rows
    trusted_carried: int = 0  # of the trusted decisions, those on children carried over (several chances each)
    audits: int = 0
    probation_audits: int = 0  # of the audits, those that tried a replayed threshold on this task here
    probation_wrong: int = 0  # of those, how many were wrong (one withdraws the replayed side for the task)
    spare: int = 0  # pruned children measured anyway: their round had nothing uncertain (not trusted, not audits)
    spare_beat: int = 0  # of those, how many beat the incumbent of their moment
    considered: int = 0  # candidates with a forecast that did not fail, or a measurement
    considered_all: int = 0  # every candidate the router saw
    paired: int = 0  # calibration rows judged by the child timed beside the incumbent's kernel
    paired_read_otherwise: int = 0  # of those, how many the two speedups measured apart would have read otherwise
    risk: float | None = None
    false_prunes: AuditRate = AuditRate()
    false_accepts: AuditRate = AuditRate()
    carried_false_prunes: AuditRate = AuditRate()  # the audited prunes of carried children, apart

    @property
    def trusted(self) -> int:
        return self.trusted_prunes + self.trusted_accepts

    @property
    def trusted_share(self) -> float:
        return self.trusted / self.decisions if self.decisions else 0.0

    def _source_note(self) -> str:
        text = f"; {self.trusted_on_replay} certified by the seed's replayed decisions" if self.trusted_on_replay else ""
        return text + (f"; {self.trusted_carried} on children carried over" if self.trusted_carried else "")

    def line(self) -> str:
        """One line for summaries: forecasts given and their spread within rounds, trusted decisions, measured
        false-prune rate vs bound."""
        text = (f"{self.given_forecasts}/{self.forecasts} forecasts given (not failed); {self.spread.text()}; "
                f"{self.trusted}/{self.decisions} decisions trusted ({self.trusted_prunes} pruned, "
                f"{self.trusted_accepts} accepted{self._source_note()}), {self.audits} audited")
        if self.probation_audits:
            text += (f" ({self.probation_audits} trying the seed's replayed thresholds on this task, "
                     f"{self.probation_wrong} wrong)")
        if self.spare:
            text += f"; {self.spare} pruned measured anyway with budget to spare ({self.spare_beat} beat the incumbent)"
        if self.paired:
            text += (f"; {self.paired} calibration rows timed beside their incumbent (on {self.paired_read_otherwise} the pair "
                     "and the speedups measured apart disagree on which was faster)")
        fp = self.false_prunes
        if fp.audited:
            text += (f"; false prunes {fp.wrong}/{fp.audited} (95 % CI {fp.interval[0]:.0%}-{fp.interval[1]:.0%})"
                     + (f", bound {self.risk:.0%}" if self.risk is not None else ""))
        if (cfp := self.carried_false_prunes).audited:
            text += f" (of carried children {cfp.wrong}/{cfp.audited})"
        return text


def live_counts(nodes: Mapping[str, NodeRecord]) -> dict[str, int]:
    """For the live view, from the search tree alone: forecasts made, those given (not failed), trusted decisions,
    and candidates considered (a forecast given or a measurement)."""
    forecast = [n for n in nodes.values() if n["forecast"] is not None]
    given = [n for n in forecast if n["forecast"] is not None and not n["forecast"]["failed"]]
    measured = [n for n in nodes.values() if n["outcome"] in ("measured", "failed", "verified")]
    trusted = [n for n in nodes.values() if n["outcome"] in ("pruned", "accepted")]
    considered = {n["hash"] for n in given} | {n["hash"] for n in measured}
    return {"forecasts": len(forecast), "given": len(given), "trusted": len(trusted),
            "considered": len(considered), "considered_all": sum(1 for n in nodes.values() if n["parent"])}


def trust_summary(store: Store, run_id: str, risk: float | None = None) -> TrustSummary:
    """The trust numbers of one run, from its stored forecasts, route events and measurements."""
    latest = store.forecasts.latest(run_id)
    given = {key for key, r in latest.items() if not r.failed}
    out = TrustSummary(forecasts=len(latest), given_forecasts=len(given), spread=forecast_spread(store, run_id),
                       risk=risk)
    audits: dict[str, list[bool]] = {"prune": [], "accept": []}
    carried_audits: list[bool] = []
    for record, m in judged_decisions(store, run_id):
        out.decisions += 1
        if m is not None and record.p_beat is not None and pair_of(record, m) is not None:  # a calibration row
            out.paired += 1
            out.paired_read_otherwise += beat_of(record, m) != beat_incumbent(record.incumbent or 1.0, m.speedup)
        if record.audit:
            out.audits += 1
            out.probation_audits += record.probation
            if record.trusted_as in audits and m is not None:
                wrong = wrong_given(record.trusted_as, beat_of(record, m))
                audits[record.trusted_as].append(wrong)
                out.probation_wrong += record.probation and wrong
                if record.carried and record.trusted_as == "prune":
                    carried_audits.append(beat_of(record, m))
        elif record.spare:
            out.spare += 1
            out.spare_beat += int(m is not None and beat_of(record, m))
        elif record.forecast_alone:
            out.trusted_on_replay += record.trust_source == SEED_REPLAY
            out.trusted_carried += record.carried
            if record.decision == "prune":
                out.trusted_prunes += 1
            else:
                out.trusted_accepts += 1
    seen = set(store.decisions.last_of_run(run_id))
    measured_any = {m.candidate_hash for m in store.ledger.find(run_id=run_id)}
    out.considered_all = len(seen)
    out.considered = len({h for h in seen if h in given or h in measured_any})
    for kind, outcomes in audits.items():
        rate = AuditRate(audited=len(outcomes), wrong=sum(outcomes),
                         interval=clopper_pearson_interval(sum(outcomes), len(outcomes)))
        setattr(out, "false_prunes" if kind == "prune" else "false_accepts", rate)
    out.carried_false_prunes = AuditRate(audited=len(carried_audits), wrong=sum(carried_audits),
                                         interval=clopper_pearson_interval(sum(carried_audits), len(carried_audits)))
    return out


__all__ = ["AuditRate", "CalibrationRow", "ForecasterKey", "RouteRecord", "TrustSummary", "TrustedDecision",
           "beat_incumbent", "beat_of", "calibration_group", "calibration_rows", "decision_wrong", "forecaster_key",
           "forecaster_of", "group_of_run", "live_counts", "pair_of", "stage_of", "trust_for",
           "trust_summary", "trusted_decisions", "wrong_given"]
