"""Forecast model and the repair of raw model numbers (no LLM needed)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from kernelcast.agents.forecast.base import (
    Forecast,
    Forecaster,
    Provenance,
    RepairError,
    parse_bin,
    peaked_distribution,
    repair_probabilities,
)

PROV = Provenance(forecaster="test")
# what SmolLM2-135M actually returned under a JSON schema (NOTES.md)
SMOL_GARBAGE = [1.58, 1.99, 2e-16, 5.5e24, 9.2e24, -2.7e24, 4.6e24, -1.9e24]


def test_forecast_summaries() -> None:
    f = Forecast.from_probabilities([0, 0, 0, 0.2, 0.6, 0.2, 0, 0], PROV)
    assert f.predicted_bin == 5
    assert f.confidence == pytest.approx(0.6)
    assert f.margin == pytest.approx(0.4)
    assert f.expected_bin == pytest.approx(5.0)
    assert f.expected_log_speedup == pytest.approx(0.2 * math.log(2 ** -0.25) + 0.6 * math.log(2 ** 0.25)
                                                   + 0.2 * math.log(math.sqrt(2 * math.sqrt(2))))
    assert 0 < f.entropy_confidence < 1
    assert not f.failed


def test_predicted_bin_is_the_argmax_not_the_stated_bin() -> None:
    f = Forecast.from_probabilities([0, 0.7, 0.3, 0, 0, 0, 0, 0], PROV, stated_bin=3)
    assert f.predicted_bin == 2
    assert f.provenance.stated_bin == 3  # kept for analysis


def test_ties_go_to_the_stated_bin_else_nearest_the_expectation() -> None:
    tie = [0, 0.4, 0, 0, 0, 0.4, 0.2, 0]
    assert Forecast.from_probabilities(tie, PROV, stated_bin=6).predicted_bin == 6
    assert Forecast.from_probabilities(tie, PROV).predicted_bin == 6  # expectation 4.6 is nearer 6


def test_uninformative_is_uniform_failed_and_low_confidence() -> None:
    f = Forecast.uninformative("transport: connection refused", forecaster="llm", model="m", latency_s=1.5)
    assert f.probabilities == pytest.approx([1 / 8] * 8)
    assert f.failed and f.provenance.failure_reason.startswith("transport")
    assert f.confidence == pytest.approx(1 / 8)
    assert f.entropy_confidence == pytest.approx(0.0, abs=1e-12)
    assert f.predicted_bin == 4  # nearest the expectation 4.5, lower on ties
    assert f.provenance.latency_s == 1.5


@pytest.mark.parametrize("bad", [[0.5] * 8, [0.5, 0.5], [float("nan")] + [1 / 7] * 7, [-0.1, 1.1] + [0] * 6])
def test_forecast_rejects_non_distributions(bad: list[float]) -> None:
    with pytest.raises(ValidationError):
        Forecast(probabilities=bad, predicted_bin=1, provenance=PROV)


def test_forecast_round_trips_through_json_and_stamps_ids() -> None:
    from kernelcast.tools.core.task import resolve_task

    task = resolve_task("saxpy")
    cand = task.reference()
    f = Forecast.from_probabilities(peaked_distribution(5), PROV, reasoning="r").for_candidate(task, cand)
    again = Forecast.model_validate_json(f.model_dump_json())
    assert again == f
    assert again.task == "saxpy" and again.candidate_hash == cand.hash


# ---- repair ------------------------------------------------------------------------
def test_smol_garbage_is_rejected_not_renormalized() -> None:
    with pytest.raises(RepairError, match="absurd"):
        repair_probabilities(SMOL_GARBAGE, predicted_bin=5)


def test_clean_probabilities_pass_unchanged() -> None:
    r = repair_probabilities([0.1, 0.2, 0.3, 0.4, 0, 0, 0, 0])
    assert not r.repaired and r.raw_sum == pytest.approx(1.0)
    assert r.probabilities == pytest.approx([0.1, 0.2, 0.3, 0.4, 0, 0, 0, 0])


def test_sum_near_one_is_renormalized_and_raw_sum_kept() -> None:
    r = repair_probabilities([0.1, 0.2, 0.3, 0.2, 0, 0, 0, 0])  # sums to 0.8
    assert r.repaired and r.raw_sum == pytest.approx(0.8)
    assert r.probabilities.sum() == pytest.approx(1.0)
    assert r.probabilities[2] == pytest.approx(0.375)


def test_small_negatives_are_clipped() -> None:
    r = repair_probabilities([-0.01, 0.51, 0.5, 0, 0, 0, 0, 0])
    assert r.repaired and any("negative" in n for n in r.notes)
    assert r.probabilities[0] == 0.0 and r.probabilities.sum() == pytest.approx(1.0)
    assert r.raw_sum == pytest.approx(1.0)


def test_percentages_are_read_as_such() -> None:
    r = repair_probabilities([10, 20, 30, 40, 0, 0, 0, 0])
    assert r.probabilities == pytest.approx([0.1, 0.2, 0.3, 0.4, 0, 0, 0, 0])
    assert "percentages" in " ".join(r.notes)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([0.5, 0.5, 0, 0, 0, 0, 0], "expected 8"),  # wrong length
        ([0.1] * 9, "expected 8"),
        ([float("nan")] + [0.1] * 7, "non-finite"),
        ([float("inf")] + [0.0] * 7, "non-finite"),
        ([0.5, -0.4, 0.9, 0, 0, 0, 0, 0], "negative"),
        ([2.0, 1.5, 1.0, 0, 0, 0, 0, 0], "too far from 1"),
        ([0.0] * 8, "zero"),
        ("bin 5 looks likely, maybe 6", "expected 8"),  # prose instead of a list
        (["high", 0, 0, 0, 0, 0, 0, 0], "non-numeric"),
        ([[0.5], 0.5, 0, 0, 0, 0, 0, 0], "non-numeric"),
    ],
)
def test_unsound_inputs_are_rejected(raw: object, message: str) -> None:
    with pytest.raises(RepairError, match=message):
        repair_probabilities(raw, predicted_bin=5)


def test_bin_only_answer_becomes_a_peaked_distribution() -> None:
    r = repair_probabilities(None, predicted_bin=6)
    assert r.repaired and r.raw_sum is None
    assert int(np.argmax(r.probabilities)) + 1 == 6
    assert r.probabilities[5] == pytest.approx(0.5)
    assert r.probabilities[4] == pytest.approx(r.probabilities[6])  # symmetric neighbours
    assert r.probabilities[4] > r.probabilities[3] > 0  # decays with distance
    assert r.probabilities.sum() == pytest.approx(1.0)
    assert repair_probabilities([], predicted_bin="2").probabilities.argmax() == 1
    with pytest.raises(RepairError):
        repair_probabilities(None, predicted_bin=9)
    with pytest.raises(RepairError):
        repair_probabilities(None)


@pytest.mark.parametrize(("raw", "expected"), [(5, 5), (5.0, 5), ("7", 7), (5.5, None), (0, None), (True, None),
                                                ("x", None), (float("nan"), None)])
def test_parse_bin(raw: object, expected: int | None) -> None:
    assert parse_bin(raw) == expected


def test_llm_forecaster_satisfies_the_protocol() -> None:
    from kernelcast.agents.forecast.llm import LLMForecaster
    from kernelcast.agents.llm.client import LLMClient

    assert isinstance(LLMForecaster(LLMClient("openai/x", api_base="http://127.0.0.1:9/v1")), Forecaster)
