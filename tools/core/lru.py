"""A least-recently-used cache with a size bound: the one eviction rule for what a long-lived worker keeps
(compiled programs by count, seeded inputs and reference outputs by bytes)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


def _one(_: object) -> int:
    return 1


class LRUCache(Generic[V]):
    """Values by key; once their total size (``weigh`` of each, 1 by default: a count) exceeds ``limit``, the
    least recently used are dropped. The newest entry stays even when it alone is larger: it is about to be
    used."""

    def __init__(self, limit: int, weigh: Callable[[V], int] = _one) -> None:
        if limit < 1:
            raise ValueError(f"a cache's limit must be at least 1, not {limit}")
        self.limit = limit
        self._weigh = weigh
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.size = 0

    def get(self, key: Hashable) -> V | None:
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: Hashable, value: V) -> None:
        if key in self._items:
            self.size -= self._weigh(self._items.pop(key))
        self._items[key] = value
        self.size += self._weigh(value)
        while len(self._items) > 1 and self.size > self.limit:
            self.size -= self._weigh(self._items.popitem(last=False)[1])

    def clear(self) -> None:
        self._items.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items


__all__ = ["LRUCache"]
