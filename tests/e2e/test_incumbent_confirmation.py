"""A forecast is trusted only against a confirmed incumbent (issue 13): the route step confirms an incumbent
measured once before a round that would trust a forecast, the run stands on that confirmation, and a kill
right after it loses nothing and buys nothing twice (real device, small sizes)."""

from __future__ import annotations

from pathlib import Path

from kernelcast.graphs.events import Spend
from kernelcast.graphs.route.trust import RouteRecord
from kernelcast.tools.store.store import Store

from support.cli import start_cli
from support.run_checks import check_invariants, check_pairing, kill_after_spends, resume_to_the_end

BUDGET = 18


def _optimize(home: Path):  # noqa: ANN202 - the CLI process
    """risk 0.99: the run's first calibration rows certify pruning, so rounds trust forecasts early."""
    return start_cli(home, "optimize", "softmax", "--budget", str(BUDGET), "--sizes", "small", "--router", "selective",
              "--risk", "0.99", "--k", "1", "--events", "jsonl")


def test_a_kill_right_after_the_incumbents_confirmation_resumes_without_buying_it_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_id, spends = kill_after_spends(_optimize(home), 1, phase="confirm")
    store = Store(home / "kernelcast.db")
    assert run_id is not None and spends == 1, "the run never confirmed anything"
    bought = store.ledger.find(run_id=run_id)
    confirmed_before = {m.candidate_hash: m.created_at for m in bought if m.phase == "confirm"}
    assert len(confirmed_before) == 1
    before = {m.candidate_hash: m.created_at for m in bought if m.phase != "confirm"}

    after = resume_to_the_end(home, store, run_id, BUDGET, before)
    for key, created in confirmed_before.items():
        assert [m.created_at for m in after if m.candidate_hash == key and m.phase == "confirm"] == [created]
    check_invariants(store, run_id, BUDGET)  # no candidate measured or confirmed twice, the best reported honestly
    # rounds against a kernel (not the reference: that needs an incumbent above 1.0x on this device) timed their
    # children beside it, after the resume too
    against_a_kernel = [e for e in store.events.find(run_id, kind="route") if e.payload.get("incumbent_hash")]
    assert check_pairing(store, run_id) > 0 or not against_a_kernel

    # every trusted decision after the resume was judged against a confirmed incumbent (or the reference), at the
    # speedup it stood on
    confirmed: dict[str, float | None] = {}
    trusted = routed_after_the_killed_confirmation = 0
    for event in store.events.find(run_id):
        routed_after_the_killed_confirmation += event.kind == "route" and bool(confirmed.keys() & confirmed_before.keys())
        if event.kind == "spend":
            spend = Spend.model_validate(event.payload)
            if spend.phase == "confirm":
                confirmed[event.candidate_hash or ""] = spend.speedup if spend.status == "correct" else None
        elif event.kind == "route" and (record := RouteRecord.model_validate(event.payload)).trusted_as:
            trusted += 1
            if record.incumbent_hash is not None:
                assert record.incumbent_hash in confirmed
                assert record.incumbent == confirmed[record.incumbent_hash]
    assert trusted, "no round trusted a forecast: the confirmation protected nothing"
    assert routed_after_the_killed_confirmation, "the kill hit a final confirmation, not one during the search"
