"""PUCT over the tree of candidates rooted at the reference (docs/architecture.md "Search").

score = Q + c * scale * P * sqrt(1 + T) / (1 + n): Q the best reward in the
subtree (measured log-speedup; a discounted forecast expectation for
unverified nodes), P a rank prior among siblings, T total expansions, n the
node's expansions, scale the spread of rewards seen.
"""

from __future__ import annotations

import math

from kernelcast.graphs.search.tree import NodeRecord

UNVERIFIED_DISCOUNT = 0.5
EXPANDABLE = ("root", "measured", "accepted", "verified")


def reward(node: NodeRecord) -> float | None:
    """Own reward of a node, or None when it says nothing (failed, pruned, pending)."""
    if node["outcome"] == "root":
        return 0.0
    if node["outcome"] in ("measured", "verified") and node["speedup"]:
        return math.log(node["speedup"])
    if node["outcome"] == "accepted" and node["forecast"] is not None:
        return UNVERIFIED_DISCOUNT * node["forecast"]["expected_log_speedup"]
    return None


def subtree_q(nodes: dict[str, NodeRecord]) -> dict[str, float]:
    """Best reward in each node's subtree (propagated up through parents)."""
    q: dict[str, float] = {}
    for key, node in nodes.items():
        r = reward(node)
        if r is None:
            continue
        cursor: str | None = key
        while cursor is not None and cursor in nodes:
            if cursor not in q or q[cursor] < r:
                q[cursor] = r
            cursor = nodes[cursor]["parent"]
    return q


def reward_scale(nodes: dict[str, NodeRecord]) -> float:
    rewards = [r for r in (reward(n) for n in nodes.values()) if r is not None]
    if len(rewards) < 2:
        return 1.0
    return max(0.1, max(rewards) - min(rewards))


def rank_priors(expected: dict[str, float]) -> dict[str, float]:
    """Siblings ranked by expected log-speedup get priors proportional to 1/(rank+1)."""
    order = sorted(expected, key=lambda h: -expected[h])
    raw = {h: 1.0 / (i + 1) for i, h in enumerate(order)}
    total = sum(raw.values()) or 1.0
    return {h: v / total for h, v in raw.items()}


def _bonus(node: NodeRecord, c: float, scale: float, total: int) -> float:
    return c * scale * node["prior"] * math.sqrt(1 + total) / (1 + node["visits"])


def select(nodes: dict[str, NodeRecord], c: float = 1.0) -> str | None:
    """Descend from the root: at each node either expand it (scored by its own reward) or move to the
    child whose subtree scores best by PUCT. None when nothing is expandable."""
    q = subtree_q(nodes)
    scale = reward_scale(nodes)
    total = sum(n["visits"] for n in nodes.values())
    children: dict[str | None, list[str]] = {}
    for key, node in nodes.items():
        children.setdefault(node["parent"], []).append(key)
    roots = [k for k, n in nodes.items() if n["parent"] is None]
    if not roots:
        return None
    cursor = roots[0]
    while True:
        node = nodes[cursor]
        options: list[tuple[float, str, bool]] = []
        if node["outcome"] in EXPANDABLE and not node["exhausted"]:
            own = reward(node) or 0.0
            options.append((own + _bonus(node, c, scale, total), cursor, True))
        for child in children.get(cursor, []):
            if child in q and _has_expandable(child, nodes, children):
                options.append((q[child] + _bonus(nodes[child], c, scale, total), child, False))
        if not options:
            return None
        _, choice, stay = max(options, key=lambda o: o[0])
        if stay:
            return choice
        cursor = choice


def _has_expandable(key: str, nodes: dict[str, NodeRecord], children: dict[str | None, list[str]]) -> bool:
    stack = [key]
    while stack:
        k = stack.pop()
        n = nodes[k]
        if n["outcome"] in EXPANDABLE and not n["exhausted"]:
            return True
        stack.extend(children.get(k, []))
    return False
