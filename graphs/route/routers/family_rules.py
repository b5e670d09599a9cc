"""The selective router's rules about transformation families: how much evidence a family needs before its
forecasts are trusted, which families are doubtful (failing more often than not here), and family coverage (one
representative of each untried family first, within a share of the budget)."""

from __future__ import annotations

from kernelcast.graphs.route.routers.base import RoutingInput
from kernelcast.graphs.route.routers.ordering import several_families

# correct measurements of a transformation family in this run before the selective router trusts any forecast
# about it: a forecaster fitted elsewhere can be confidently wrong about a whole family on a kernel it never saw
MIN_FAMILY_EVIDENCE = 2
# at most this share of a run's budget goes to covering families (one representative each) before the forecasts
# decide: a derived space offers seven or more families (coarsening in three mappings, local tile, unroll,
# restrict, work-group, generic variants), so at budget 8 covering them took every measurement of the run and left
# nothing to follow what they found (docs/benchmarks.md, the held-out corpus)
COVERAGE_SHARE = 0.5


def unproven_family(item: RoutingInput) -> bool:
    """Whether the item's family has too few measurements in this run for any forecast about it to be trusted."""
    return bool(item.family) and item.family_measured < MIN_FAMILY_EVIDENCE


def doubtful_family(item: RoutingInput) -> bool:
    """Whether the item's family failed in this run more often than it measured correct (P(correct) <= 1/2)."""
    return bool(item.family) and item.family_failed > item.family_measured


def doubtful_siblings_last(ordered: list[RoutingInput]) -> tuple[list[RoutingInput], set[str]]:
    """``ordered`` with every child of a doubtful family but its first moved to the end (in their order), and the
    hashes moved: a round measures one child of such a family while it has other children to measure, and the
    siblings wait for that child's outcome. A round of four measurements otherwise put all four into a failing
    family whenever its shared correctness draw said "correct" (:func:`thompson_draw`): 12 of 25 measurements on
    a held-out kernel with a coarsening bug put back. A round with nothing else to measure still measures them,
    and a round of one family is left as it is (a template's points are one family, and so are an LLM's kernels)."""
    probed: set[str] = set()  # doubtful families whose first child keeps its place
    waiting: set[str] = set()
    if not several_families(ordered):
        return ordered, waiting
    for item in ordered:
        if not doubtful_family(item):
            continue
        if item.family in probed:
            waiting.add(item.hash)
        probed.add(item.family)
    return [*(it for it in ordered if it.hash not in waiting), *(it for it in ordered if it.hash in waiting)], waiting


def coverage_first(ranked: list[RoutingInput], limit: int | None = None) -> list[RoutingInput]:
    """``ranked`` (best first) with one representative of each family not tried yet in this run moved to
    the front (at most ``limit`` of them; None: all), each its family's best-ranked, in the order of those
    representatives: a run's first measurements cover the families its generator offers before the forecaster's
    ranking, which on a kernel it never saw may put a whole family at the bottom, decides where the rest go. A
    family whose representative failed is covered: another of it is left to the draws (:func:`thompson_draw`)."""
    firsts: dict[str, RoutingInput] = {}
    for item in ranked:
        if item.family and not item.family_tried and not item.failed:
            firsts.setdefault(item.family, item)
    chosen = {item.hash for item in list(firsts.values())[:None if limit is None else max(0, limit)]}
    return [*(item for item in ranked if item.hash in chosen), *(item for item in ranked if item.hash not in chosen)]


def coverage_room(budget: int, can_measure: int) -> int | None:
    """How many family representatives a round may put first: those the part of the budget left beyond
    (1 - COVERAGE_SHARE) of it can pay (None, no limit, for a router that was not told its budget)."""
    if budget <= 0:
        return None
    return max(0, can_measure - (budget - int(COVERAGE_SHARE * budget)))
