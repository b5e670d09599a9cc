"""Thread coarsening with jam: one work-item does the work of FX x FY work-items of the original.

The copies' statements are merged ("jammed") into the same loops, so the loads they share are issued
once: with FX = FY = 4 a naive GEMM work-item keeps a 4x4 block of C in registers and reads 4 values of
A and 4 of B per step of k instead of 32 (register blocking). The global size shrinks by the factors.

Why it is legal: the original work-items have no order among themselves and, without barriers, local
memory or work-group queries (checked), cannot communicate, so any interleaving of their statements is
a legal execution. Jamming needs the copies to agree on control flow; where they may not (bounds
guards), the jammed fast path runs when every copy's condition holds and the copies run one after the
other otherwise. An early ``if (...) return;`` becomes a fallback that runs each surviving copy alone.

Mappings: ``cyclic`` gives copy c the id ``gid + c * global_size`` (neighbouring work-items stay on
neighbouring elements: vectorizers and GPU coalescing keep working); ``block`` gives ``gid * F + c``
(each work-item owns F neighbouring elements); ``vector`` is ``block`` in x with the x-copies as the lanes
of OpenCL vectors (:mod:`kernelcast.agents.generate.transforms.vectorize`).
"""

from __future__ import annotations

from kernelcast.agents.generate.kernel_ast import Span
from kernelcast.agents.generate.transforms import NotApplicable, Rewritten, checked, rewritten, work_item_kernel
from kernelcast.agents.generate.transforms.jam import Jammer
from kernelcast.agents.generate.transforms.vectorize import VectorJammer
from kernelcast.tools.core.candidate import Candidate
from kernelcast.tools.core.expr import ExpressionError, evaluate
from kernelcast.tools.core.task import Task

MAPPINGS = ("cyclic", "block", "vector")  # vector: x-copies as lanes (agents.transforms.vectorize)
FACTORS = (1, 2, 4, 8)


def _divides(task: Task, expr: str, factor: int) -> bool:
    for which in ("small", "full"):
        try:
            value = evaluate(expr, task.sizes(which))
        except (ExpressionError, ZeroDivisionError, TypeError):
            return False
        if not float(value).is_integer() or int(value) % factor:
            return False
    return True


def coarsen(task: Task, candidate: Candidate, fx: int, fy: int = 1, mapping: str = "cyclic") -> Rewritten:
    """Coarsen the entry kernel by ``fx`` in x and ``fy`` in y and jam the copies."""
    if mapping not in MAPPINGS:
        raise NotApplicable(f"unknown mapping {mapping!r} ({', '.join(MAPPINGS)})")
    if fx * fy <= 1:
        raise NotApplicable("coarsening by 1 is the identity")
    language, entry = task.language, task.spec.entry
    ps, kernel = work_item_kernel(candidate, language, entry, "coarsening")
    factors = {0: fx, 1: fy}
    glob = list(candidate.global_size)
    for dim, f in factors.items():
        if f == 1:
            continue
        if dim >= len(glob):
            raise NotApplicable(f"the launch has no dimension {dim}")
        if not _divides(task, glob[dim], f):
            raise NotApplicable(f"global size {glob[dim]} is not a multiple of {f} at every size set")
        glob[dim] = f"({glob[dim]}) / {f}"
    jammer: Jammer = VectorJammer(ps, kernel, factors) if mapping == "vector" else Jammer(ps, kernel, factors, mapping)
    body = jammer.kernel_body()
    if mapping == "vector" and not getattr(jammer, "vectorized", 0):
        raise NotApplicable("no statement of the kernel has a lane value to vectorize")
    source = ps.edited([Span(*ps.span(jammer.body), body)])
    local = candidate.local_size
    if local and not all(_divides(task, g, int(evaluate(size, task.sizes("full"))))
                         for g, size in zip(glob, local, strict=True)):
        local = None
    label = f"coarsen x{fx} y{fy} {mapping} + jam"
    if jammer.shared_loads:
        label += f" ({jammer.loads_total - jammer.shared_loads} of {jammer.loads_total} loads issued)"
    return rewritten(checked(candidate, source, language, entry, global_size=glob, local_size=local), "coarsen", label,
                     x=fx, y=fy, mapping=mapping)
