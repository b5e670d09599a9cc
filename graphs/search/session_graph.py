"""A session's graph: the optimization state machine with the generate step replaced by the caller.

select → await_candidates → forecast → route → (measure) → backup → select ... ; finish → verify → report

``await_candidates`` is a LangGraph ``interrupt``: the graph stops there, checkpointed, until the caller
resumes it with ``Command(resume=SessionCommand(...))``. Submitted candidates pass the same
:class:`~kernelcast.agents.generate.base.Validator` every generator's proposals pass (no host code, the
reference's signature, not a duplicate, valid geometry and options, it compiles), and the valid ones
become children of the parent exactly as :meth:`ExpandStep.generate` adds them; the rest of the round
(forecast, route, measure, back up) is :class:`SearchNodes`' own, so the budget, the reserve, the
router and "a measurement is stored before its checkpoint" hold as in any run. A submission with no
valid candidate changes nothing and waits again. The session ends only when the caller says finish.

A kernel this device measured before at the session's sizes (another run's, another session's) is not bought
again, nor refused: its stored live result is reused at no cost (:mod:`kernelcast.graphs.search.reuse`), the
kernel joins the tree measured, and its verdict says so.

A submission's ``params`` claim a template point, and a stored, measured point is one no generator proposes
again: so a candidate with params is refused (reason ``params``) unless it is the task's template instantiated
at them, the same kernel by identity (source, geometry, options). A caller cannot make a slow kernel of its own
stand for a template point.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from langgraph.graph import StateGraph
from langgraph.types import interrupt
from pydantic import BaseModel, Field, ValidationError

from kernelcast.agents.generate.base import ProposalReport, Validator
from kernelcast.agents.generate.dedup import Deduplicator
from kernelcast.agents.registry import EXTERNAL  # the generator name of a session's runs
from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.search.graph import add_search_steps
from kernelcast.graphs.search.nodes import SearchNodes, after_select
from kernelcast.graphs.search.puct import EXPANDABLE
from kernelcast.graphs.search.reuse import StoredResult, reuse, stored_results
from kernelcast.graphs.search.spender import apply_measurement
from kernelcast.graphs.search.tree import NodeRecord, SearchState, TreeEdit, new_node, takes_the_lead
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.task import Task, TaskError

WRONG_TASK = "wrong_task"  # a rejection reason of sessions only (the Validator's reasons are the others)
MALFORMED = "malformed"
PARAMS = "params"  # params that are not the submitted kernel's template point


class SubmittedCandidate(BaseModel):
    """One candidate from the caller: device source plus launch geometry, build options and intent."""

    source: str = Field(description="device source with the reference kernel's name and argument list")
    global_size: list[str] | None = Field(default=None, description="global size expressions (default: the parent's)")
    local_size: list[str] | None = Field(default=None, description="local size expressions (default: the parent's; "
                                                           "[] lets the runtime choose)")
    build_options: list[str] = Field(default_factory=list, description="compiler options")
    intent: str = Field(default="", description="what the change is meant to do (shown in the search tree)")
    task: str | None = Field(default=None, description="the task the candidate was written for (checked when given)")
    params: dict[str, Any] | None = Field(default=None, description=(
        "the template point the candidate is, if any: it must be the task's template instantiated at these values "
        "(same source, geometry and options), or the candidate is refused"))


class SessionCommand(BaseModel):
    """What resumes the interrupt: candidates for a parent, or finish (verify the best, write the report)."""

    action: Literal["submit", "finish"]
    parent: str | None = None  # full hash of a node in the tree (None: the one the search selected)
    candidates: list[SubmittedCandidate] = Field(default_factory=list)


class Verdict(BaseModel):
    """The validation result of one submitted candidate, in submission order."""

    index: int
    valid: bool
    hash: str | None = None
    intent: str = ""
    reason: str = Field(default="", description="rejection reason code (a Validator reason, wrong_task, malformed "
                                                "or params)")
    detail: str = Field(default="", description="how it was validated, or why it was rejected")
    reused: bool = Field(default=False, description="measured on this device before: the stored result stands, "
                                                    "nothing charged")


class SessionState(SearchState, total=False):
    verdicts: list[dict[str, Any]]  # Verdict dumps of the last submission
    round_parent: str | None  # the parent the last submission extended
    submissions: int
    finish_requested: bool


def expandable(nodes: Mapping[str, NodeRecord], key: str) -> bool:
    return key in nodes and nodes[key]["outcome"] in EXPANDABLE


class SessionNodes:
    """The caller's step; every other step is :class:`SearchNodes`'."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.search = SearchNodes(ctx, carry_over=False)  # a caller reads each submission's verdicts

    def await_candidates(self, state: SessionState) -> dict[str, Any]:
        command: SessionCommand = interrupt({"kind": "await_candidates", "parent": state.get("parent"),
                                             "iteration": state.get("iteration", 0)},
                                            response_schema=SessionCommand)
        if command.action == "finish":
            return {"finish_requested": True, "children": [], "to_measure": [],
                    "stop_reason": "the caller finished the session"}
        nodes = TreeEdit(state["nodes"])
        parent_key = command.parent or state.get("parent")
        submissions = state.get("submissions", 0) + 1
        if parent_key is None or not expandable(nodes, parent_key):  # the front door checks this first
            verdicts = [Verdict(index=i, valid=False, reason="parent", detail=f"no expandable node {parent_key!r}")
                        for i in range(len(command.candidates))]
            return {"verdicts": [v.model_dump() for v in verdicts], "children": [], "submissions": submissions}
        verdicts, accepted, reused = self.validate(nodes, parent_key, command.candidates)
        children = []
        for cand in accepted:
            self.ctx.store.candidates.add(cand)
            nodes[cand.hash] = new_node(cand, parent_key, nodes[parent_key]["depth"] + 1, state.get("iteration", 0))
            children.append(cand.hash)
        best, to_best = state.get("best"), state.get("measurements_to_best", 0)
        for cand, found in reused:
            best, to_best = self.add_reused(nodes, parent_key, cand, found, state.get("iteration", 0), best, to_best)
        self.ctx.emit(ev.Generated(parent=parent_key, children=children, report=self._summary(verdicts)),
                      candidate_hash=parent_key)
        update: dict[str, Any] = {"verdicts": [v.model_dump() for v in verdicts], "round_parent": parent_key,
                                  "children": children, "submissions": submissions}
        if reused:
            update.update(nodes=nodes.changes(), best=best, measurements_to_best=to_best)
        if children:
            update.update(nodes=nodes.changes(), parent=parent_key, to_measure=[], empty_rounds=0)
        return update

    def add_reused(self, nodes: TreeEdit, parent_key: str, cand: Candidate, found: StoredResult, iteration: int,
                   best: str | None, to_best: int) -> tuple[str | None, int]:
        """Put a kernel measured before into the tree with its stored result (copied under the session, not
        charged): (best, measurements to it) after it."""
        ctx = self.ctx
        ctx.store.candidates.add(cand)
        node = new_node(cand, parent_key, nodes[parent_key]["depth"] + 1, iteration)
        for m in reuse(ctx.store, ctx.run_id, found):
            if m.phase != "confirm":
                node["outcome"] = "measured" if m.ok else "failed"
            apply_measurement(node, m, m.phase)
        node["reason"] = f"{found.describe()}" + (f"; {node['reason']}" if node["reason"] else "")
        nodes[cand.hash] = node
        ctx.emit(ev.Reused(phase="search", reason=found.describe()), candidate_hash=cand.hash)
        if takes_the_lead(nodes, cand.hash, best):
            return cand.hash, self.search.budget.spent()
        return best, to_best

    def validate(self, nodes: Mapping[str, NodeRecord], parent_key: str, submitted: Iterable[SubmittedCandidate]
                 ) -> tuple[list[Verdict], list[Candidate], list[tuple[Candidate, StoredResult]]]:
        """Each submission through the generators' Validator (compiled by the run's measurer), against the tree:
        (verdicts, new children, kernels this device measured before at these sizes, whose stored result is
        reused: never bought twice, never refused)."""
        ctx = self.ctx
        parent = ctx.store.candidates.get(parent_key)
        assert parent is not None, f"parent {parent_key} missing from the store"
        stored = stored_results(ctx.store, ctx.task, ctx.hardware.key, ctx.measure_config.sizes)
        report = ProposalReport(generator=EXTERNAL)
        validator = Validator(ctx.task, parent, report, Deduplicator(set(nodes)), ctx.measurer, ctx.hardware)
        verdicts: list[Verdict] = []
        accepted: list[Candidate] = []
        reused: list[tuple[Candidate, StoredResult]] = []
        for index, item in enumerate(submitted):
            intent = " ".join(item.intent.split())[:200] or "external candidate"
            if item.task is not None and item.task != ctx.task.name:
                verdicts.append(Verdict(index=index, valid=False, intent=intent, reason=WRONG_TASK,
                                        detail=f"the candidate is for task {item.task!r}; this session optimizes "
                                               f"{ctx.task.name!r}"))
                continue
            try:
                cand = Candidate(task=ctx.task.name, source=item.source,
                                 global_size=item.global_size or parent.global_size,
                                 local_size=parent.local_size if item.local_size is None else (item.local_size or None),
                                 build_options=item.build_options, params=item.params, parent=parent_key,
                                 origin="written", note=intent, generator=EXTERNAL)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                verdicts.append(Verdict(index=index, valid=False, intent=intent, reason=MALFORMED, detail=problems))
                continue
            claim = params_problem(ctx.task, cand)
            if claim:
                verdicts.append(Verdict(index=index, valid=False, hash=cand.hash, intent=intent, reason=PARAMS,
                                        detail=claim))
                continue
            if cand.hash in stored and cand.hash not in nodes:
                if any(c.hash == cand.hash for c, _ in reused):
                    verdicts.append(Verdict(index=index, valid=False, hash=cand.hash, intent=intent,
                                            reason="duplicate", detail=f"{cand.short} is twice in this submission"))
                    continue
                reused.append((cand, stored[cand.hash]))
                verdicts.append(Verdict(index=index, valid=True, hash=cand.hash, intent=intent, reused=True,
                                        detail=stored[cand.hash].describe()))
                continue
            if validator.check(cand):
                accepted.append(cand)
                verdicts.append(Verdict(index=index, valid=True, hash=cand.hash, intent=intent,
                                        detail=report.validation[cand.hash]))
                continue
            rejection = report.rejections[-1]
            detail = rejection.detail
            if rejection.reason.value == "duplicate":
                detail = self._duplicate_detail(cand.hash, nodes) or detail
            verdicts.append(Verdict(index=index, valid=False, hash=cand.hash, intent=intent,
                                    reason=rejection.reason.value, detail=detail))
        return verdicts, accepted, reused

    @staticmethod
    def _duplicate_detail(key: str, nodes: Mapping[str, NodeRecord]) -> str:
        if key in nodes:
            return f"{key[:8]} is already in this session's tree (outcome {nodes[key]['outcome']})"
        return ""  # a duplicate inside this submission: the Validator's words

    @staticmethod
    def _summary(verdicts: list[Verdict]) -> str:
        valid = sum(1 for v in verdicts if v.valid)
        reused = sum(1 for v in verdicts if v.reused)
        return (f"{EXTERNAL}: submitted {len(verdicts)}, valid {valid}" + (f" ({reused} reused)" if reused else "")
                + f", rejected {len(verdicts) - valid}")


def params_problem(task: Task, candidate: Candidate) -> str:
    """Why ``candidate``'s params are not the template point it is ("" when it has none, or is the task's template
    instantiated at them: the same identity). Stored params make a kernel count as that point's measurement, which
    generators then skip, so only the template's own instantiation may carry them."""
    if candidate.params is None:
        return ""
    claimed = ", ".join(f"{k}={v!r}" for k, v in sorted(candidate.params.items())) or "(none)"
    try:
        point = task.instantiate(candidate.params)
    except TaskError as exc:
        return f"params {claimed} name no template point: {exc}; submit the kernel without params"
    if point.hash != candidate.hash:
        return (f"params {claimed} claim template point {point.short}, but this kernel ({candidate.short}) is not the "
                f"template instantiated there (source, geometry and options must be its own); submit it without "
                "params, or the point itself")
    return ""


def after_await(state: SessionState) -> str:
    """Finish when asked; a round when something valid came; otherwise wait for the caller again."""
    if state.get("finish_requested"):
        return "finish"
    return "forecast" if state.get("children") else "await"


def build_session_graph(ctx: RunContext) -> StateGraph:
    session = SessionNodes(ctx)
    nodes = session.search
    graph = StateGraph(SessionState)
    add_search_steps(graph, nodes, ctx)
    graph.add_node("await_candidates", session.await_candidates)
    graph.add_conditional_edges("select", after_select, {"generate": "await_candidates", "finish": "verify"})
    graph.add_conditional_edges("await_candidates", after_await,
                                {"finish": "verify", "forecast": "forecast", "await": "await_candidates"})
    graph.add_edge("backup", "select")  # the caller, not the budget, ends a session (routing stops spending)
    return graph
