"""The replay check: three small runs recorded on the CPU OpenCL device (selective on gemv, measure-all on stencil2d,
a session on saxpy; ``--sizes small``) are replayed through the replay measurer with the same seeds, and every
routing decision (candidate, verdict, stage, P(beat), incumbent, audit, trust source, ...), the ledger and the
results must be what the replay with the recording's code gave (``tests/support/replay_check.py``). No device: the
replay answers from the recorded measurements. A refactoring that keeps behaviour keeps this passing."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.paths import ROOT
from support.replay_check import Recording, differences, load, replay

RECORDINGS = ROOT / "tests" / "data" / "replay_check.json.gz"


def recordings() -> list[Recording]:
    return load(RECORDINGS)


@pytest.mark.parametrize("recording", recordings(), ids=lambda r: r.name)
def test_a_replay_decides_as_the_recorded_code_did(recording: Recording, tmp_path: Path) -> None:
    assert recording.expected is not None and recording.expected.decisions, "a recording without decisions"
    got = replay(recording, tmp_path)
    assert differences(recording.expected, got) == []


def test_the_recordings_cover_the_three_kinds_of_run() -> None:
    """Selective (with trusted or audited decisions to check), measure-all and a session."""
    found = {r.name: r for r in recordings()}
    assert set(found) == {"selective", "measure-all", "session"}
    assert found["session"].kind == "session" and found["session"].commands
    assert {d.decision for d in found["measure-all"].expected.decisions} <= {"measure", "drop"}  # type: ignore[union-attr]
