"""Run reports: a self-contained HTML page and PNGs, rebuilt from the store alone.

Everything comes from the SQLite store (the system of record): the search
tree and the progress curve from the run's events, forecasts joined with the
run's own measurements, the top kernels from its correct measurements. So a
report can be drawn for an interrupted run too, and it cannot disagree with
what the run recorded. matplotlib is imported lazily and used through
``Figure`` objects only (no pyplot state, no display needed).
"""

from __future__ import annotations

import base64
import difflib
import html
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kernelcast.graphs import events as ev
from kernelcast.graphs.config import RunConfig
from kernelcast.graphs.events import logged
from kernelcast.graphs.route.forecast_spread import ForecastSpread, forecast_spread, predicted_log_speedup
from kernelcast.graphs.search.result import (
    RunResult,
    ShownSpeedup,
    best_curve,
    interval_text,
    plural,
    provisional_answer,
    ranked,
    run_roofline,
    shown_speedups,
)
from kernelcast.graphs.search.roofline import RooflineVerdict, Throughput, run_throughput
from kernelcast.graphs.search.tree import DECISION_OUTCOME
from kernelcast.stores import has_store, reading_store
from kernelcast.tools.core.bins import BIN_NAMES, NUM_BINS
from kernelcast.tools.core.errors import InputError
from kernelcast.tools.core.measurement import Measurement
from kernelcast.tools.store.records import EventRecord, RunRecord
from kernelcast.tools.store.store import Store, StoreError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from kernelcast.graphs.search.result import RunResult

PLOTS = ("progress", "tree", "confusion", "reliability")
OUTCOME_COLORS = {"root": "#000000", "measured": "#2ca02c", "verified": "#006400", "accepted": "#1f77b4",
                  "pruned": "#9e9e9e", "failed": "#d62728", "dropped": "#ff9f40", "pending": "#ffffff"}
UNINFORMATIVE = NUM_BINS + 1  # confusion-matrix row of forecasts that had nothing to say


class ReportError(InputError, ValueError):
    """The run is unknown or the output folder cannot be written."""


@dataclass
class TreeNode:
    parent: str | None
    depth: int
    outcome: str = "pending"


@dataclass
class ForecastPair:
    """One of this run's forecasts and the run's measurement of the same candidate."""

    probabilities: list[float]
    predicted_bin: int
    confidence: float
    failed: bool
    measured_bin: int  # 0 = failure
    predicted_log_speedup: float  # the forecaster's continuous belief about ln S when it has one, else from the bins
    measured_speedup: float | None  # the shown speedup of the candidate (None: it failed)


@dataclass
class RunData:
    run_id: str
    run: RunRecord
    config: RunConfig
    result: RunResult | None  # None until the run has finished
    tree: dict[str, TreeNode]
    root: str | None
    curve: list[tuple[int, ShownSpeedup | None]]  # (measurements spent, the best found by then, valued as shown)
    pairs: list[ForecastPair]
    measurements: list[Measurement] = field(default_factory=list)
    shown: dict[str, ShownSpeedup] = field(default_factory=dict)  # every correct node's shown speedup
    throughput: Throughput | None = None  # the best's GFLOP/s and GB/s against the device's peaks
    roofline: RooflineVerdict | None = None  # the reference's and the best's place under the device's roofs
    spread: ForecastSpread = field(default_factory=ForecastSpread)  # how far each round's forecasts differed

    @property
    def best(self) -> ShownSpeedup | None:
        """The run's best node as every part of the report shows it (headline, star, first row, curve end)."""
        return next(iter(ranked(self.shown)), None)


# ---- data from the store ----------------------------------------------------------------
def load_run(store: Store, run_id: str) -> RunData:
    run = store.runs.get(run_id)
    if run is None:
        raise ReportError(f"no run with id {run_id!r} (see `kernelcast runs`)")
    events = store.events.find(run.id)
    measurements = store.ledger.find(run_id=run.id)
    root, tree = rebuild_tree(events)
    shown = shown_speedups(measurements)
    top = next(iter(ranked(shown)), None)
    return RunData(run_id=run.id, run=run, config=RunConfig.of_run(run), result=RunResult.of_run(run), tree=tree,
                   root=root, curve=best_curve(measurements), pairs=forecast_pairs(store, run.id, measurements, shown),
                   measurements=measurements, shown=shown,
                   throughput=run_throughput(store, run, top.candidate_hash) if top is not None else None,
                   roofline=run_roofline(store, run), spread=forecast_spread(store, run.id))


def rebuild_tree(events: Sequence[EventRecord]) -> tuple[str | None, dict[str, TreeNode]]:
    """The search tree from the event log: ``generated`` adds children, ``route``/``spend``/``skip`` set outcomes."""
    tree: dict[str, TreeNode] = {}
    root: str | None = None
    for item in logged(list(events)):
        event, key = item.event, item.candidate
        if isinstance(event, ev.Generated):
            parent = event.parent
            if parent is None:
                continue
            if parent not in tree:
                root = root or parent
                tree[parent] = TreeNode(parent=None, depth=0, outcome="root")
            for child in event.children:
                tree.setdefault(child, TreeNode(parent=parent, depth=tree[parent].depth + 1))
        elif key is None or key not in tree:
            continue
        elif isinstance(event, ev.Route):
            outcome = DECISION_OUTCOME.get(event.decision)  # "measure": pending until its spend
            tree[key].outcome = outcome.value if outcome is not None else "pending"
        elif isinstance(event, ev.Spend) and event.phase != "confirm":  # a confirmation re-measures a node
            ok = event.status == "correct"
            tree[key].outcome = ("verified" if event.phase == "verify" else "measured") if ok else "failed"
        elif isinstance(event, ev.Spend) and event.status != "correct":  # failed its confirmation
            tree[key].outcome = "failed"
        elif isinstance(event, ev.Skip):
            tree[key].outcome = "dropped"
    return root, tree


def forecast_pairs(store: Store, run_id: str, measurements: Sequence[Measurement],
                   shown: Mapping[str, ShownSpeedup]) -> list[ForecastPair]:
    """This run's forecasts joined with this run's first measurement of the same candidate (the one the
    forecast predicted; a confirmation is not a second pair): each candidate's last forecast, the one its
    routing was decided on (a child carried over is forecast once per round)."""
    measured = {m.candidate_hash: m for m in measurements if m.phase != "confirm"}
    pairs = []
    for f in store.forecasts.latest(run_id).values():
        m = measured.get(f.candidate_hash)
        if m is None:
            continue
        node = shown.get(f.candidate_hash)
        pairs.append(ForecastPair(probabilities=f.probabilities, predicted_bin=f.predicted_bin,
                                  confidence=f.confidence, failed=f.failed, measured_bin=m.bin(),
                                  predicted_log_speedup=predicted_log_speedup(f),
                                  measured_speedup=node.speedup if node is not None else None))
    return pairs


def confusion_counts(pairs: Sequence[ForecastPair]) -> np.ndarray:
    """Rows: predicted bin 1..8 then failed forecasts ('uninformative'); columns: measured bin 0 (failure) .. 8."""
    counts = np.zeros((NUM_BINS + 1, NUM_BINS + 1), dtype=int)
    for p in pairs:
        row = UNINFORMATIVE if p.failed else p.predicted_bin
        counts[row - 1, p.measured_bin] += 1
    return counts


def reliability(pairs: Sequence[ForecastPair], n_buckets: int = 10) -> tuple[list[dict[str, float]], float | None]:
    """Per confidence bucket: mean confidence, accuracy, count (forecasts given of correct kernels); ECE."""
    from kernelcast.agents.forecast.scoring import ece
    from kernelcast.calibration_report import reliability_buckets

    usable = [p for p in pairs if not p.failed and p.measured_bin > 0]
    if not usable:
        return [], None
    conf = np.array([p.confidence for p in usable])
    hits = np.array([float(p.predicted_bin == p.measured_bin) for p in usable])
    return reliability_buckets(conf, hits, n_buckets), ece(conf, hits, n_buckets)


# ---- figures --------------------------------------------------------------------------
def _figure(width: float = 7.0, height: float = 4.5) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=110, layout="constrained")


def run_label(run: RunData) -> str:
    """A run in a legend: its id, router and best shown speedup ("15.68x (confirmed) 15.41x-15.95x")."""
    best = run.best
    if best is None:
        return f"{run.run_id} ({run.config.router}): no correct kernel"
    interval = f" {interval_text(best.interval)}" if best.confirmed and best.interval else ""
    return f"{run.run_id} ({run.config.router}): {best.short()}{interval}"


def by_result(runs: Sequence[RunData]) -> list[RunData]:
    """Runs best first by their best node's shown speedup: confirmed results rank above first measurements."""
    return sorted(runs, key=lambda r: r.best.rank if r.best is not None else (False, 0.0), reverse=True)


def progress_figure(runs: Sequence[RunData]) -> Figure:
    """The best kernel found vs hardware measurements spent, one line per run, each kernel valued as its run
    reports it (its confirmation where it has one: :func:`kernelcast.graphs.search.result.best_curve`), the runs ranked
    by their confirmed results; every curve ends on its run's result, a diamond with its 95 % interval."""
    fig = _figure()
    ax = fig.add_subplot()
    for run in by_result(runs):
        xs = [0] + [x for x, _ in run.curve]
        ys = [np.nan] + [np.nan if y is None else y.speedup for _, y in run.curve]
        line, = ax.step(xs, ys, where="post", marker="o", markersize=3, label=run_label(run))
        best = run.best
        if best is not None and best.confirmed:
            low, high = best.interval or (best.speedup, best.speedup)
            ax.errorbar([xs[-1]], [best.speedup], yerr=[[best.speedup - low], [high - best.speedup]], fmt="D",
                        color=line.get_color(), markersize=6, capsize=4, label="_confirmed")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="_reference")
    ax.set_xlabel("hardware measurements spent")
    ax.set_ylabel("best speedup (x): confirmed where confirmed")
    ax.set_title("best speedup vs measurements (diamond: confirmed, 95 % interval; dashed: reference = 1x)",
                 fontsize=9)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tree_layout(tree: dict[str, TreeNode]) -> dict[str, tuple[float, int]]:
    """Layered layout: y = depth, leaves spread left to right in depth-first order, parents centred over children."""
    children: dict[str | None, list[str]] = {}
    for key, node in tree.items():
        children.setdefault(node.parent, []).append(key)
    pos: dict[str, tuple[float, int]] = {}
    next_x = [0.0]

    def place(key: str) -> float:
        kids = children.get(key, [])
        x = float(np.mean([place(k) for k in kids])) if kids else next_x[0]
        if not kids:
            next_x[0] += 1.0
        pos[key] = (x, tree[key].depth)
        return x

    for top in children.get(None, []):
        place(top)
    return pos


def tree_figure(run: RunData) -> Figure:
    """The search tree coloured by outcome; the run's best kernel is starred with its shown speedup."""
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    pos = tree_layout(run.tree)
    width = min(16.0, max(6.0, 0.18 * max((x for x, _ in pos.values()), default=0)))
    fig = _figure(width, 4.8)
    ax = fig.add_subplot()
    segments = [[pos[n.parent], pos[k]] for k, n in run.tree.items() if n.parent in pos]
    ax.add_collection(LineCollection(segments, colors="#bbbbbb", linewidths=0.8, zorder=1))
    keys = list(pos)
    ax.scatter([pos[k][0] for k in keys], [pos[k][1] for k in keys], s=36, zorder=2, edgecolors="#333333",
               linewidths=0.5, c=[OUTCOME_COLORS.get(run.tree[k].outcome, "#ffffff") for k in keys])
    best = run.best
    if best is not None and best.candidate_hash in pos:
        star = pos[best.candidate_hash]
        ax.scatter([star[0]], [star[1]], marker="*", s=260, c="gold", edgecolors="black", zorder=3)
        ax.annotate(best.short(), star, xytext=(6, 6), textcoords="offset points", fontsize=8)
    seen = sorted({n.outcome for n in run.tree.values()}, key=list(OUTCOME_COLORS).index)
    counts = {o: sum(1 for n in run.tree.values() if n.outcome == o) for o in seen}
    ax.legend(handles=[Line2D([], [], marker="o", linestyle="", markerfacecolor=OUTCOME_COLORS[o],
                              markeredgecolor="#333333", label=f"{o} ({counts[o]})") for o in seen],
              fontsize=8, loc="lower right")
    ax.set_yticks(range(max((n.depth for n in run.tree.values()), default=0) + 1))
    ax.invert_yaxis()
    ax.set_ylabel("depth")
    ax.set_xticks([])
    ax.margins(0.05, 0.15)
    ax.set_title(f"search tree of {run.run_id} ({len(run.tree) - 1 if run.tree else 0} candidates)")
    return fig


def confusion_figure(run: RunData) -> Figure:
    """Forecast bin vs measured bin for this run's forecasts that were measured."""
    counts = confusion_counts(run.pairs)
    fig = _figure(7.0, 5.6)
    ax = fig.add_subplot()
    ax.imshow(counts, cmap="Blues", aspect="auto")
    for (i, j), n in np.ndenumerate(counts):
        if n:
            ax.text(j, i, str(n), ha="center", va="center", fontsize=8,
                    color="white" if n > counts.max() / 2 else "black")
    ax.set_xticks(range(NUM_BINS + 1), ["fail", *map(str, range(1, NUM_BINS + 1))])
    ax.set_yticks(range(NUM_BINS + 1), [*map(str, range(1, NUM_BINS + 1)), "uninf."])
    ax.set_xlabel("measured bin")
    ax.set_ylabel("predicted bin")
    n = int(counts.sum())
    right = int(np.trace(counts[:NUM_BINS, 1:]))
    ax.set_title(f"forecast vs measured bin: {n} pairs, {right} right" if n else
                 "forecast vs measured bin: no forecast of this run was measured")
    return fig


def reliability_figure(run: RunData) -> Figure:
    """Accuracy per confidence bucket against the diagonal of perfect calibration."""
    from kernelcast.calibration_report import reliability_plot

    buckets, ece_value = reliability(run.pairs)
    fig = _figure(5.5, 5.0)
    ax = fig.add_subplot()
    if buckets:
        title = f"reliability: {sum(b['count'] for b in buckets)} forecasts, ECE {ece_value:.3f}"
    else:
        failed = sum(1 for p in run.pairs if p.failed)
        ax.text(0.5, 0.5, f"no forecast given of a correct kernel\n({failed} failed)",
                ha="center", va="center", fontsize=9)
        title = "reliability: nothing to draw"
    reliability_plot(ax, buckets, title)
    return fig


# ---- top kernels ------------------------------------------------------------------------
@dataclass
class TopKernel:
    hash: str
    shown: ShownSpeedup
    intent: str
    geometry: str
    diff: str


def top_kernels(store: Store, run: RunData, n: int = 5) -> list[TopKernel]:
    """The run's best kernels in the order the run stands on them (confirmed first: the reported best leads),
    each with a unified diff against the reference."""
    reference = store.candidates.get(run.root) if run.root else None
    out = []
    for shown in ranked(run.shown)[:n]:
        cand = store.candidates.get(shown.candidate_hash)
        if cand is None:
            continue
        ref_lines = reference.source.splitlines(keepends=True) if reference else []
        diff = "".join(difflib.unified_diff(ref_lines, cand.source.splitlines(keepends=True), "reference",
                                            f"candidate {cand.short}"))
        out.append(TopKernel(hash=cand.hash, shown=shown,
                             intent=cand.intent, diff=diff or "(same source as the reference; geometry or options differ)",
                             geometry=f"global {cand.global_size} local {cand.local_size or 'runtime'} "
                                      f"options {' '.join(cand.build_options) or '-'}"))
    return out


# ---- the page ---------------------------------------------------------------------------
def write_report(run_id: str, compare: Sequence[str] = (), out: str | Path | None = None,
                 store: Store | None = None) -> Path:
    """Write ``report.html`` and the PNGs; returns the HTML path (default folder: the run folder)."""
    from kernelcast.tools.core.settings import get_settings

    if store is None and not has_store():
        raise ReportError(f"no run with id {run_id!r}: nothing has run yet ({get_settings().db_path} does not exist)")
    try:
        with nullcontext(store) if store is not None else reading_store() as db:
            run = load_run(db, run_id)
            others = [load_run(db, other) for other in compare if other != run.run_id]
            top = top_kernels(db, run)
    except StoreError as exc:
        raise ReportError(str(exc)) from None
    folder = Path(out) if out else Path(run.run.folder or get_settings().runs_dir / run.run_id)
    figures = {"progress": progress_figure([run, *others]), "tree": tree_figure(run),
               "confusion": confusion_figure(run), "reliability": reliability_figure(run)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        images = {}
        for name, fig in figures.items():
            path = folder / f"{name}.png"
            fig.savefig(path)
            images[name] = base64.b64encode(path.read_bytes()).decode()
        page = folder / "report.html"
        page.write_text(render_html(run, others, images, top))
    except OSError as exc:
        raise ReportError(f"cannot write the report to {folder}: {exc.strerror or exc} (choose a folder with "
                          "--out)") from None
    return page


def report_note(result: RunResult) -> str:
    """One line for the end of ``optimize``: where the report is (a failed report never fails the run)."""
    try:
        return f"report: {write_report(result.run_id)}"
    except Exception as exc:  # noqa: BLE001 - the run is done; a plotting problem is only worth a line
        return f"report not written: {type(exc).__name__}: {exc}"


RECOVERED_AT = (10, 25, 50)  # top k % of the run's forecast-ranked candidates


@dataclass
class RankSkill:
    """How well this run's forecasts ordered its candidates (the question a search asks of them), beside the
    bins: Spearman of predicted ln S against the measured (shown) speedup, and the recovered speedup at the top
    k % (best shown speedup among the k % ranked highest / best of all those measured)."""

    n: int
    spearman: float | None  # None: fewer than 3 correct pairs, or one side constant
    recovered: dict[int, float]  # k % -> share of the best recovered (empty: no correct kernel)


def rank_skill(pairs: Sequence[ForecastPair]) -> RankSkill:
    from scipy.stats import spearmanr

    from kernelcast.agents.forecast.scoring import recovered_speedup

    given = [p for p in pairs if not p.failed]
    correct = [p for p in given if p.measured_speedup is not None]
    rho = None
    if len(correct) >= 3 and len({p.predicted_log_speedup for p in correct}) > 1 and \
            len({p.measured_speedup for p in correct}) > 1:
        rho = float(spearmanr([p.predicted_log_speedup for p in correct],
                              [p.measured_speedup for p in correct]).statistic)
    recovered = {}
    if correct:
        scores = [p.predicted_log_speedup for p in given]
        speeds = [p.measured_speedup for p in given]
        recovered = {k: recovered_speedup(scores, speeds, k) for k in RECOVERED_AT}
    return RankSkill(n=len(given), spearman=rho, recovered=recovered)


def _scores(pairs: Sequence[ForecastPair]) -> str:
    from kernelcast.agents.forecast.scoring import summarize

    usable = [p for p in pairs if not p.failed and p.measured_bin > 0]
    note = (f"{len(pairs)} forecasts of this run were measured; {sum(p.failed for p in pairs)} failed (no forecast: "
            f"deferred to hardware), {sum(p.measured_bin == 0 for p in pairs)} were of failed kernels.")
    if not usable:
        return f"<p>{note}</p>"
    s = summarize([p.probabilities for p in usable], [p.measured_bin for p in usable],
                  [p.predicted_bin for p in usable])
    bins = {p.measured_bin for p in usable}
    degenerate = ""
    if len(bins) == 1:
        only = next(iter(bins))
        degenerate = (f"<p><b>Degenerate:</b> every measured candidate landed in bin {only} ({BIN_NAMES[only]}), so "
                      "accuracy and within-one-bin only say whether the forecaster named that bin; they say nothing "
                      "about telling candidates apart. Read the rank skill below.</p>")
    rows = "".join(f"<tr><td>{k}</td><td>{v:.3f}{' (degenerate: one bin)' if degenerate and k in DEGENERATE else ''}"
                   f"</td></tr>" for k, v in (
        ("accuracy", s.accuracy), ("within one bin", s.within_one), ("Brier (halved)", s.brier_halved),
        ("CRPS (ordinal)", s.crps), ("ECE (10 buckets)", s.ece), ("AURC", s.aurc),
        ("mean confidence", s.mean_confidence)))
    skill = rank_skill(pairs)
    rho = f"{skill.spearman:.3f}" if skill.spearman is not None else "n/a (fewer than 3 distinct correct pairs)"
    skill_rows = f"<tr><td>Spearman (predicted ln S vs measured speedup)</td><td>{rho}</td></tr>" + "".join(
        f"<tr><td>recovered speedup at the top {k} %</td><td>{v:.3f}</td></tr>" for k, v in skill.recovered.items())
    return (f"<p>{note} Scores over the {s.n} given forecasts of correct kernels:</p>{degenerate}<table>{rows}</table>"
            f"<p>In-task rank skill over the {skill.n} forecasts given (measured speedups as shown: "
            f"confirmed where confirmed):</p><table>{skill_rows}</table>")


DEGENERATE = ("accuracy", "within one bin")


def render_html(run: RunData, others: Sequence[RunData], images: dict[str, str], top: Sequence[TopKernel]) -> str:
    e = html.escape
    row, config, result = run.run, run.config, run.result
    answer = result.answer_with(run.best) if result is not None else provisional_answer(run.best, run.root)
    best = "none measured"
    if run.best is not None:
        speed = f"{run.best.text()}; " if answer.is_reference else ""
        best = (f"{speed}candidate {run.best.candidate_hash[:8]}, first measured after "
                f"{plural(run.best.found_at, 'measurement')}")
    facts = [("task", row.task), ("device", row.device), ("status", row.status),
             ("router", config.router), ("risk", config.risk if config.router_spec.certifies_trust else "-"),
             ("forecaster", config.forecaster), ("sizes", config.sizes),
             ("measurements", f"{row.spent} of {row.budget}"),
             ("candidates considered", result.considered if result is not None else max(0, len(run.tree) - 1)),
             ("answer", f"{answer.headline()}: {answer.why}" if answer.why else answer.headline()),
             ("best measured candidate", best),
             ("best's throughput", run.throughput.text() if run.throughput is not None else "-"),
             ("roofline", run.roofline.text if run.roofline is not None else "-"),
             ("forecast spread", run.spread.text()),
             ("stop reason", result.stop_reason if result is not None else "-"),
             ("path", " → ".join(result.best_path if result is not None else []) or "-")]
    if others:
        facts.append(("compared with (best first)", "; ".join(run_label(o) for o in by_result([run, *others]))))
    fact_rows = "".join(f"<tr><th>{e(str(k))}</th><td>{e(str(v))}</td></tr>" for k, v in facts)
    captions = {"progress": "Best speedup vs hardware measurements spent (confirmed where confirmed)",
                "tree": "Search tree by outcome (measured, verified, accepted, pruned, failed, dropped)",
                "confusion": "Forecast bin vs measured bin",
                "reliability": "Reliability of this run's forecasts"}
    figures = "".join(
        f'<figure><a href="{name}.png"><img alt="{name}.png" src="data:image/png;base64,{images[name]}"></a>'
        f"<figcaption>{captions[name]} ({name}.png)</figcaption></figure>" for name in PLOTS if name in images)
    kernel_rows = "".join(
        f"<tr><td><code>{k.hash[:8]}</code></td><td>{e(k.shown.text())}</td><td>{(k.shown.cv or 0):.1%}</td>"
        f"<td>{e(k.intent)}</td><td>{e(k.geometry)}</td><td><details><summary>diff</summary>"
        f"<pre>{e(k.diff)}</pre></details></td></tr>" for k in top) or '<tr><td colspan="6">no correct kernel</td></tr>'
    bins = ", ".join(f"{b} {name}" for b, name in BIN_NAMES.items())
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kernelcast report {e(run.run_id)}</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;
vertical-align:top}}figure{{margin:1.5em 0}}img{{max-width:100%}}pre{{font-size:12px;background:#f6f6f6;
padding:8px;overflow-x:auto}}figcaption{{color:#555;font-size:.9em}}</style></head><body>
<h1>kernelcast run {e(run.run_id)}</h1>
<table>{fact_rows}</table>
{figures}
<h2>Forecasts</h2>{_scores(run.pairs)}<p style="font-size:.85em;color:#555">Bins: {e(bins)}.</p>
<h2>Top kernels</h2>
<p style="font-size:.85em;color:#555">Confirmed kernels first (by their confirmation), then first measurements;
CV: of the first measurement's timings.</p>
<table><tr><th>candidate</th><th>speedup</th><th>CV</th><th>intent</th><th>geometry</th><th>vs reference</th></tr>
{kernel_rows}</table>
</body></html>
"""
