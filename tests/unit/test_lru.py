"""The one eviction rule of what a worker keeps: compiled programs by count, inputs and reference outputs by
bytes (tools.lru.LRUCache)."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcast.tools.core.lru import LRUCache


def _nbytes(named: dict[str, np.ndarray]) -> int:
    return sum(a.nbytes for a in named.values())


def arrays(kib: int) -> dict[str, np.ndarray]:
    return {"out": np.zeros(kib * 256, dtype=np.float32)}


def test_by_bytes_the_least_recently_used_go_first_and_the_size_stays_exact() -> None:
    cache: LRUCache[dict[str, np.ndarray]] = LRUCache(2048, _nbytes)
    cache.put("a", arrays(1))
    cache.put("b", arrays(1))
    assert cache.get("a") is not None  # a is now the most recently used
    cache.put("c", arrays(1))
    assert "b" not in cache and "a" in cache and "c" in cache
    cache.put("c", arrays(1))  # replacing an entry does not count it twice
    assert cache.size == 2048 and len(cache) == 2


def test_an_entry_larger_than_the_limit_is_kept_alone() -> None:
    cache: LRUCache[dict[str, np.ndarray]] = LRUCache(1024, _nbytes)
    cache.put("small", arrays(1))
    cache.put("big", arrays(4))
    assert len(cache) == 1 and cache.get("big") is not None and cache.size == 4096


def test_by_count_and_a_limit_below_one_is_refused() -> None:
    cache: LRUCache[str] = LRUCache(2)
    for key in "xyz":
        cache.put(key, key)
    assert [k for k in "xyz" if k in cache] == ["y", "z"]
    cache.clear()
    assert len(cache) == 0 and cache.size == 0
    with pytest.raises(ValueError, match="at least 1"):
        LRUCache(0)
