"""Transfer across devices: forecast a kernel on one device from other devices' timings of the same kernel.

GPU search spaces move between GPUs more than they reshuffle: ranking a space by one GPU's recorded times and
measuring the top 8 on another recovered a median 83 % of the optimum across the shared recordings
(issue 63). So a kernel's ln S on the target device is forecast as the similarity-weighted mean of its ln S on the
other devices that measured or recorded it (each over that device's own reference, the same kernel everywhere),
and the belief's sd widens with the distance between the target and the devices that speak for it: a recording of
another vendor's GPU says less than one of a sibling. With zero measurements of the target, the forecasts rank the
space by what the other devices saw; as the run measures, each source device is weighed by how well its ln S
agreed with the target's measured ones (:meth:`TransferForecaster.learn`).

Never trained on the target device's recordings: rows of the target device are read only as the run measures them
(its own replayed or live rows, handed to :meth:`learn`). A kernel no other device measured gets the fallback's
forecast (the roofline prior by default), or an uninformative one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kernelcast.agents.forecast.base import CertifiedSkill, Forecast, Forecaster, Provenance
from kernelcast.agents.forecast.distributions import lognormal_bins
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.measurement import Provenance as RowProvenance
from kernelcast.tools.core.task import Task
from kernelcast.tools.store.store import Store

NAME = "transfer"
SOURCES: tuple[RowProvenance, ...] = ("live", "recorded", "imported")  # whose rows speak for other devices
BASE_SD = 0.15  # ln S sd of a forecast from an identical device (run-to-run noise, recording age)
SD_PER_DISTANCE = 0.25  # added per unit of device distance (another vendor is 1.5 units away, see device_distance)
AGREEMENT_GAIN = 3.0  # how strongly a source's rank agreement with the target's measurements reweighs it
# Target measurements before agreement moves weights. A Spearman of n pairs has a null sd of 1/sqrt(n - 1): 0.58-0.71
# at 3-4 pairs, more than the gap it must tell apart (a sibling GPU agrees at 0.84-0.96, another vendor's at
# 0.33-0.61, issue 63), so after a first round of four it reweighed siblings on noise and re-ranked the space
# (convolution/A4000: its ranking's 6th point, 0.91 of the optimum, fell out of the next picks). From 6 pairs: 0.45.
MIN_PAIRS = 6
CERTIFY_SLACK = 0.5  # a source certifies the target's skill when its nearest other source is this near as far


def device_distance(a: HardwareSpec, b: HardwareSpec) -> float:
    """How far apart two devices are for transfer: another vendor 1.5, another device type 2, plus the log2 gaps
    of compute units, clock, last-level cache and (data-sheet or probed) peak bandwidth and FLOP/s."""
    if a.key == b.key:
        return 0.0
    distance = 0.0 if a.device_type.upper() == b.device_type.upper() else 2.0
    distance += 0.0 if (a.vendor or "?").split()[0].lower() == (b.vendor or "?").split()[0].lower() else 1.5

    def gap(x: float, y: float, weight: float) -> float:
        return weight * abs(math.log2(max(x, 1.0)) - math.log2(max(y, 1.0))) if x > 0 and y > 0 else 0.25 * weight

    distance += gap(a.compute_units, b.compute_units, 0.3) + gap(a.clock_mhz, b.clock_mhz, 0.3)
    distance += gap(a.last_level_cache_bytes or a.global_cache_bytes, b.last_level_cache_bytes or b.global_cache_bytes,
                    0.1)
    for key in ("peak_bandwidth_gbs", "peak_fp32_gflops"):
        x, y = a.extra.get(key), b.extra.get(key)
        if isinstance(x, int | float) and isinstance(y, int | float):
            distance += gap(float(x), float(y), 0.3)
    return distance


@dataclass
class _Source:
    """One other device's view of the task: ln S per candidate, and its weight for the target."""

    spec: HardwareSpec
    log_speedups: dict[str, float]
    distance: float
    agreement: float = 0.0  # rank correlation with the target's measurements (0 until MIN_PAIRS)

    @property
    def weight(self) -> float:
        return math.exp(-self.distance) * math.exp(AGREEMENT_GAIN * self.agreement)


@dataclass
class TransferForecaster:
    """Forecasts a device from other devices' rows of the same task (see the module)."""

    store: Store
    fallback: Forecaster | None = None
    exclude_devices: frozenset[str] = frozenset()  # devices never read (a benchmark's held-out GPU)
    name: str = NAME
    _sources: dict[tuple[str, str], list[_Source]] = field(default_factory=dict)
    _measured: dict[str, float] = field(default_factory=dict)  # the target's measured ln S, by candidate

    def sources(self, task: Task, hardware: HardwareSpec) -> list[_Source]:
        """The other devices' ln S of this task's candidates (their latest correct full-size rows)."""
        key = (task.fingerprint, hardware.key)
        if key not in self._sources:
            devices = self.store.devices.all()
            by_device: dict[str, dict[str, float]] = {}
            for device, key_, speedup in self.store.ledger.correct_speedups(task.name, task.fingerprint, SOURCES):
                if device != hardware.key and device not in self.exclude_devices:
                    by_device.setdefault(device, {})[key_] = math.log(speedup)
            self._sources[key] = [_Source(devices[d], values, device_distance(hardware, devices[d]))
                                  for d, values in by_device.items() if d in devices]
        return self._sources[key]

    def forecast(self, task: Task, candidate: Candidate, hardware: HardwareSpec) -> Forecast:
        return self.forecast_many(task, [candidate], hardware)[0]

    def forecast_many(self, task: Task, candidates: Sequence[Candidate], hardware: HardwareSpec) -> list[Forecast]:
        sources = self.sources(task, hardware)
        out: list[Forecast] = []
        missing: list[int] = []
        for i, cand in enumerate(candidates):
            belief = self.belief(cand.hash, sources)
            if belief is None:
                missing.append(i)
                out.append(Forecast.uninformative("no other device measured or recorded this kernel",
                                                  forecaster=NAME))
                continue
            mean, sd, speakers = belief
            prov = Provenance(forecaster=NAME, mode="transfer", log_speedup_mean=mean, log_speedup_sd=sd)
            out.append(Forecast.from_probabilities(
                lognormal_bins(mean, sd), prov,
                reasoning=f"ln S {mean:+.2f} ± {sd:.2f} from {speakers}").for_candidate(task, cand))
        if missing and self.fallback is not None:
            filled = self.fallback.forecast_many(task, [candidates[i] for i in missing], hardware)
            for i, forecast in zip(missing, filled, strict=True):
                out[i] = forecast
        return out

    def belief(self, key: str, sources: Sequence[_Source]) -> tuple[float, float, str] | None:
        """(mean, sd, who spoke) of ln S on the target, or None when no source has the kernel."""
        if key in self._measured:
            return self._measured[key], BASE_SD / 2, "this device's own measurement"
        speaking = [(s, s.log_speedups[key]) for s in sources if key in s.log_speedups]
        if not speaking:
            return None
        weights = np.array([s.weight for s, _ in speaking])
        values = np.array([v for _, v in speaking])
        weights = weights / weights.sum()
        mean = float(weights @ values)
        between = float(math.sqrt(max(0.0, weights @ (values - mean) ** 2)))
        nearest = min(s.distance for s, _ in speaking)
        sd = math.sqrt(between ** 2 + (BASE_SD + SD_PER_DISTANCE * nearest) ** 2)
        names = ", ".join(s.spec.name for s, _ in speaking[:3]) + ("..." if len(speaking) > 3 else "")
        return mean, sd, names

    def certified_skill(self, task: Task, hardware: HardwareSpec) -> CertifiedSkill | None:
        """The rank skill this forecaster showed on a source device standing where the target stands: each source
        in turn forecast from the others alone (as the target is), Spearman of that forecast against its own ln
        S, read from the source whose nearest other source is as far as the target's nearest (within
        CERTIFY_SLACK units of distance). None with fewer than three sources or no source in the target's
        place: a GPU of another vendor than all its sources is certified by nothing, since sources of one vendor
        only ever forecast each other (the W6600 from three NVIDIA GPUs: their mutual 0.84-0.96 said nothing of
        its 0.33-0.43, issue 63)."""
        from scipy.stats import spearmanr

        sources = self.sources(task, hardware)
        if len(sources) < 3:
            return None
        nearest = min(s.distance for s in sources)
        best: tuple[float, CertifiedSkill] | None = None
        for held in sources:
            others = [_Source(s.spec, s.log_speedups, device_distance(held.spec, s.spec)) for s in sources
                      if s is not held]
            gap = abs(min(o.distance for o in others) - nearest)
            if gap > CERTIFY_SLACK or (best is not None and best[0] <= gap):
                continue
            keys = [k for k in held.log_speedups if any(k in o.log_speedups for o in others)]
            if len(keys) < 2 * MIN_PAIRS:
                continue
            forecast = [self.belief(k, others) for k in keys]
            rho = spearmanr([f[0] for f in forecast if f is not None],
                            [held.log_speedups[k] for k, f in zip(keys, forecast, strict=True) if f is not None]
                            ).statistic
            if np.isfinite(rho):
                best = (gap, CertifiedSkill(float(rho), len(keys), f"{held.spec.name} forecast from the other "
                                            f"sources alone ranked its {len(keys)} kernels at Spearman {rho:.2f}"))
        return best[1] if best is not None else None

    def ranked(self, task: Task, hardware: HardwareSpec) -> list[tuple[float, str]]:
        """(forecast ln S mean, hash) of every kernel another device measured or recorded, best first: the
        forecaster's ranking of the space it knows, read from its sources without building a forecast per kernel
        (a recorded GPU space has 4,000-11,000), as it stands after what :meth:`learn` has taught it."""
        sources = self.sources(task, hardware)
        known = {key for source in sources for key in source.log_speedups}
        means = ((belief[0], key) for key in known if (belief := self.belief(key, sources)) is not None)
        return sorted(means, key=lambda pair: (-pair[0], pair[1]))

    def learn(self, pairs: Sequence[tuple[Candidate, Measurement]], hardware: Mapping[str, HardwareSpec]) -> bool:
        """Take the run's measurements of the target: measured kernels are forecast as measured, and each source
        device is weighed by the rank agreement of its ln S with the target's (Spearman, shrunk toward 0 by the
        number of pairs)."""
        from scipy.stats import spearmanr

        measured = {c.hash: math.log(m.speedup) for c, m in pairs if m.ok and m.speedup}
        if measured == self._measured:
            return False
        self._measured = measured
        for sources in self._sources.values():
            for source in sources:
                shared = [k for k in measured if k in source.log_speedups]
                if len(shared) < MIN_PAIRS:
                    source.agreement = 0.0
                    continue
                rho = spearmanr([measured[k] for k in shared], [source.log_speedups[k] for k in shared]).statistic
                n = len(shared)
                source.agreement = 0.0 if not np.isfinite(rho) else float(rho) * n / (n + 5)
        return True


__all__ = ["NAME", "TransferForecaster", "device_distance"]
