"""Calibration rows replayed from the shipped seed dataset, so trust can start on a device's first run.

The router trusts a forecast only as far as calibration rows certify it (:mod:`risk_control`), and a store
gains rows only from measured decisions: about 21 per budget-24 run, of which a handful land where a prune
could be certified. On a fresh store nothing was trusted before the fourth to sixth run (router_bench).

These rows are the seed's measurements replayed as a search meets them: for each (task, device) group of the
seed and each of the two situations a live run can be in (the task new to the forecaster, or the device new
to it), the forecaster is rebuilt without the held-out rows, taught ``k`` of the group's measurements, and
asked P(S > incumbent) for the rest, the incumbent being the best of the ``k`` (at least the reference).
Each answer with its outcome is a calibration row at stage ``k``.

The stage matters: in the shipped rows, decisions with P(beat) <= 0.1 beat the incumbent 7.2 % of the time
after 2 taught measurements, 6.1 % after 4, 4.0 % after 6 and 5.1 % after 8-20 (rows of 2026-12-04, with the
prior's probed launch costs; before them 9.9, 6.7, 4.1 and 4.8 %; before the prior modelled CPU vectorization
across work-items and the last-level cache, 11.8, 7.8, 5.1 and 5.5 %).
So rows are certified per stage bucket (:func:`stage_bucket`), live decisions included, and a threshold
earned late in runs is never applied to the first rounds of one.

On by default (``RunConfig.trust_seed_replay``), but never trusted on a task and device before the trial
(:func:`kernelcast.graphs.route.risk_control.probation`): on its first router bench, without the trial, 5 of 30
checked trusted prunes were wrong against a 10 % bound, so the replayed rows are not shown exchangeable with a
live run's decisions until the device has judged them.

The file is built by ``python -m kernelcast.graphs.route.replay_calibration`` and must be rebuilt when the
forecaster changes (a test replays one group and compares).
"""

from __future__ import annotations

import bisect
import gzip
import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernelcast.agents.forecast.base import Forecast
from kernelcast.agents.forecast.distributions import p_beat
from kernelcast.graphs.route.risk_control import CalibrationRow
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.measurement import HardwareSpec, Measurement
from kernelcast.tools.core.task import Task

STAGE_EDGES = (1, 4, 8, 16)  # stage buckets: 0 | 1-3 | 4-7 | 8-15 | 16 and more measurements
REPLAY_KS = (2, 4, 6, 8, 12, 16, 20)  # taught measurements per replay: at least two per bucket past 0
REPLAY_DRAWS = 2  # random draws of the taught measurements per group and k
MODES = ("task", "device")  # what the rebuilt forecaster has not seen: the group's task, or its device
Pairs = Sequence[tuple[Candidate, Measurement]]


def stage_bucket(measured: int) -> int:
    """The bucket of a decision taken after ``measured`` correct measurements of its run."""
    return bisect.bisect_right(STAGE_EDGES, measured)


def forecast_p_beat(forecast: Forecast, incumbent: float) -> float | None:
    """P(S > incumbent) from a forecast, read as the router reads it."""
    prov = forecast.provenance
    return p_beat(forecast.probabilities, incumbent, prov.log_speedup_mean, prov.log_speedup_sd, prov.log_speedup_dof)


@dataclass(frozen=True)
class ReplayRow:
    """One replayed decision: which held-out situation, group, stage and draw, the forecast's p, the outcome."""

    mode: str
    group: str
    k: int
    draw: int
    p_beat: float
    beat: bool

    @property
    def task(self) -> str:
        return self.group.split("@", 1)[0]

    def calibration(self) -> CalibrationRow:
        """The row for certification, grouped by its task (a live run's risk is on one task)."""
        return CalibrationRow(self.p_beat, self.beat, self.task)


def _draw_rng(mode: str, group: str, k: int, draw: int) -> np.random.Generator:
    """A generator fixed by the replay's coordinates, so one group can be replayed alone and compared."""
    return np.random.default_rng([zlib.crc32(mode.encode()), zlib.crc32(group.encode()), k, draw])


def replay_group(mode: str, task_name: str, device: str, pairs: Pairs, devices: Mapping[str, HardwareSpec],
                 lookup: Callable[[str], Task], ks: Sequence[int] = REPLAY_KS, draws: int = REPLAY_DRAWS
                 ) -> list[ReplayRow]:
    """The replayed decisions of one (task, device) group with its task (mode "task") or device ("device")
    held out of the forecaster."""
    from kernelcast.agents.forecast.blend import BlendedForecaster
    from kernelcast.agents.forecast.features import device_similarity
    from kernelcast.agents.forecast.learned import LearnedForecaster, training_set

    def held_out(m: Measurement) -> bool:
        return m.task == task_name if mode == "task" else m.device == device

    group = f"{task_name}@{device}"
    train_pairs = [(c, m) for c, m in pairs if not held_out(m)]
    own = [(c, m) for c, m in pairs if m.task == task_name and m.device == device and m.ok and m.speedup]
    train = training_set(train_pairs, lookup, hardware=devices)
    hw = devices[device]
    forest = LearnedForecaster().fit(train, [device_similarity(devices.get(d), hw) for d in train.devices])
    task = lookup(task_name)
    rows: list[ReplayRow] = []
    for k in ks:
        if len(own) <= k + 1:
            continue
        for draw in range(draws):
            picked = set(_draw_rng(mode, group, k, draw).choice(len(own), k, replace=False).tolist())
            taught = [own[i] for i in sorted(picked)]
            rest = [own[i] for i in range(len(own)) if i not in picked]
            learner = BlendedForecaster(forest, train, history=train_pairs, hardware=devices, tasks=lookup)
            learner.learn(taught, devices)
            incumbent = max(1.0, max(m.speedup or 0.0 for _, m in taught))
            for (_, m), fc in zip(rest, learner.forecast_many(task, [c for c, _ in rest], hw), strict=True):
                p = forecast_p_beat(fc, incumbent)
                if p is not None:
                    rows.append(ReplayRow(mode, group, k, draw, p, (m.speedup or 0.0) > incumbent))
    return rows


def build_replay(pairs: Pairs, devices: Mapping[str, HardwareSpec], lookup: Callable[[str], Task],
                 progress: Callable[[str], None] | None = None) -> list[ReplayRow]:
    """Every group of ``pairs`` (with a known device) replayed in both modes."""
    groups = sorted({(m.task, m.device) for _, m in pairs if m.device in devices})
    rows: list[ReplayRow] = []
    for mode in MODES:
        for i, (task_name, device) in enumerate(groups):
            rows += replay_group(mode, task_name, device, pairs, devices, lookup)
            if progress is not None:
                progress(f"{mode} held out: {i + 1}/{len(groups)} groups, {len(rows)} rows")
    return rows


def write_rows(rows: Sequence[ReplayRow], path: Path) -> None:
    with gzip.open(path, "wt") as fh:
        for row in rows:
            fh.write(json.dumps(asdict(row)) + "\n")


def read_rows(path: Path) -> list[ReplayRow]:
    with gzip.open(path, "rt") as fh:
        return [ReplayRow(**json.loads(line)) for line in fh if line.strip()]


@lru_cache(maxsize=4)
def shipped_by_stage(path: Path) -> dict[int, tuple[CalibrationRow, ...]]:
    """A shipped replay's rows (a forecaster spec's ``seed_replay``) grouped by stage bucket (empty when the file is
    absent)."""
    if not path.exists():
        return {}
    out: dict[int, list[CalibrationRow]] = {}
    for row in read_rows(path):
        out.setdefault(stage_bucket(row.k), []).append(row.calibration())
    return {bucket: tuple(rows) for bucket, rows in out.items()}


def main() -> None:
    """Rebuild the learned forecaster's shipped replay rows from the shipped seed dataset (the replay rebuilds the
    learned forecaster per held-out group: :func:`replay_group`)."""
    from kernelcast.agents.factory import SEED_DATASET
    from kernelcast.agents.forecast.learned import task_lookup
    from kernelcast.agents.registry import SEED_REPLAY
    from kernelcast.tools.store.pairs import read_pairs

    pairs, devices = read_pairs(SEED_DATASET)
    rows = build_replay(pairs, devices, task_lookup(None), progress=print)
    write_rows(rows, SEED_REPLAY)
    print(f"wrote {len(rows)} rows to {SEED_REPLAY}")


if __name__ == "__main__":
    main()


__all__ = ["MODES", "REPLAY_DRAWS", "REPLAY_KS", "ReplayRow", "STAGE_EDGES", "build_replay",
           "forecast_p_beat", "read_rows", "replay_group", "shipped_by_stage", "stage_bucket", "write_rows"]
