"""The steps that grow the tree and spend nothing: root it at the reference, select a parent (PUCT), and add
the generator's proposals as its children."""

from __future__ import annotations

import math
from typing import Any

from kernelcast.agents.generate.base import GenerationContext, ProposalReport, Proposals
from kernelcast.agents.generate.guided import guided_points
from kernelcast.graphs import events as ev
from kernelcast.graphs.context import RunContext
from kernelcast.graphs.route.routers.selective import guides_generator
from kernelcast.graphs.search import puct
from kernelcast.graphs.search.tree import CHECKPOINT_VERSION, SearchState, TreeEdit, new_node


class ExpandStep:
    """init, select and generate."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def init(self, state: SearchState) -> dict[str, Any]:
        """Root the tree at the reference (measured later only if a speedup needs a baseline: never), in a state
        of this code's checkpoint version."""
        if state.get("nodes"):
            return {}
        ref = self.ctx.task.reference()
        self.ctx.store.tasks.upsert(self.ctx.task)
        self.ctx.store.devices.upsert(self.ctx.hardware)
        self.ctx.store.candidates.add(ref)
        root = new_node(ref, None, 0, 0, outcome="root")
        self.ctx.emit(ev.Start(config=self.ctx.config.model_dump(), device=self.ctx.hardware.key))
        return {"version": CHECKPOINT_VERSION, "run_id": self.ctx.run_id, "iteration": 0,
                "nodes": {ref.hash: root}, "parent": None, "children": [], "to_measure": [], "empty_rounds": 0,
                "finished": False, "stop_reason": "", "best": None, "measurements_to_best": 0}

    def select(self, state: SearchState) -> dict[str, Any]:
        parent = puct.select(state["nodes"], self.ctx.config.puct_c)
        if parent is None:
            return {"finished": True, "stop_reason": "nothing left to expand", "parent": None, "children": [],
                    "carried": []}
        return {"parent": parent, "iteration": state["iteration"] + 1, "children": [], "to_measure": [],
                "carried": []}

    def generate(self, state: SearchState) -> dict[str, Any]:
        ctx = self.ctx
        nodes = TreeEdit(state["nodes"])
        parent_key = state["parent"]
        assert parent_key is not None
        parent = ctx.store.candidates.get(parent_key)
        assert parent is not None
        siblings = [k for k, n in nodes.items() if n["parent"] == parent_key]
        context = GenerationContext.from_store(
            ctx.store, ctx.task, ctx.hardware.key, parent, hardware=ctx.hardware,
            seed=ctx.config.seed * 100_003 + state["iteration"], siblings=siblings, extra_known=nodes.keys(),
            sizes=ctx.config.sizes, run_id=ctx.run_id)
        node = nodes[parent_key]
        if node["outcome"] == "accepted" and node["forecast"]:
            context = context.model_copy(update={"parent_speedup": math.exp(node["forecast"]["expected_log_speedup"]),
                                                 "parent_speedup_kind": "forecast"})
        wanted = ctx.config.n_opening if node["parent"] is None else ctx.config.n_children
        if ctx.config.follow_skill:
            context = self.guided(context, wanted)
        try:
            proposals = ctx.generator.propose(ctx.task, parent, context, wanted)
        except Exception as exc:  # noqa: BLE001 - a broken generator ends this expansion, not the run
            proposals = Proposals([], ProposalReport(generator=ctx.generator.name, errors=[str(exc)]))
            ctx.emit(ev.GeneratorError(error=f"{type(exc).__name__}: {exc}"), candidate_hash=parent_key)

        children = []
        for cand in proposals.candidates:
            if cand.hash in nodes:
                continue
            ctx.store.candidates.add(cand)
            nodes[cand.hash] = new_node(cand, parent_key, node["depth"] + 1, state["iteration"])
            children.append(cand.hash)
        ctx.emit(ev.Generated(parent=parent_key, children=children, report=proposals.report.summary()),
                 candidate_hash=parent_key)
        empty = state.get("empty_rounds", 0) + 1 if not children else 0
        if not children:
            nodes[parent_key]["exhausted"] = True
        return {"nodes": nodes.changes(), "children": children, "empty_rounds": empty}

    def guided(self, context: GenerationContext, wanted: int) -> GenerationContext:
        """The context with the forecaster's best-ranked unmeasured template points to propose first (RunConfig's
        ``follow_skill``, where the router's regime follows the ranking), and, on a replayed recording, template
        points only: it cannot answer a generic variant, so one would spend a measurement on a refusal."""
        ctx = self.ctx
        points = guided_points(ctx.forecaster, ctx.store, ctx.task, ctx.hardware, context.excluded(),
                               wanted if guides_generator(ctx.router) else 0)
        return context.model_copy(update={"guided": points,
                                          "template_only": ctx.config.replay is not None
                                          and ctx.task.spec.template is not None})
