"""Deduplication of proposals by content hash.

A measurement is the scarce resource, so the same kernel must never be
proposed twice: not a kernel already in the store, not one already in this
search, not a cosmetic edit of either. :attr:`kernelcast.tools.core.candidate.Candidate.hash`
already ignores comments and whitespace, so one set of hashes is enough.
"""

from __future__ import annotations

from collections.abc import Iterable

from kernelcast.tools.core.candidate import Candidate


class Deduplicator:
    """Remembers hashes; drops (and counts) candidates seen before."""

    def __init__(self, known_hashes: Iterable[str] = ()) -> None:
        self._seen: set[str] = set(known_hashes)
        self.dropped = 0

    def __contains__(self, candidate: Candidate) -> bool:
        return candidate.hash in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, candidate: Candidate) -> bool:
        """Record ``candidate``; False (and one more drop) when its hash was already known."""
        key = candidate.hash
        if key in self._seen:
            self.dropped += 1
            return False
        self._seen.add(key)
        return True

    def filter(self, candidates: Iterable[Candidate]) -> list[Candidate]:
        """The new candidates, in order, each hash once (duplicates inside the batch dropped too)."""
        return [c for c in candidates if self.add(c)]
