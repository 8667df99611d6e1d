"""Kept pairs -> the French references of each English sentence: identical pairs once, at most
`max_references` per sentence, chosen the same way on any number of workers.

Both steps are Beam combines, so workers pre-combine before the shuffle and no worker ever
holds all the references of a sentence seen 10,000 times: a pair's copies become one
(first position, count), a sentence's references the `max_references` smallest by hash.
"""
from __future__ import annotations

import hashlib
import heapq
from typing import Iterable, NamedTuple

import apache_beam as beam

# Where a pair was read: (file path, byte offset), so references keep their file order.
Position = tuple[str, int]


def reference_hash(french: str) -> int:
    """The same on every worker and run (Python's hash() of a str is salted per process);
    all 256 bits, so two distinct references never tie."""
    return int.from_bytes(hashlib.sha256(french.encode("utf-8")).digest(), "big")


class Copies(NamedTuple):
    """Every occurrence of one (English, French) pair: the first one's position, how many."""
    first: Position
    count: int


class _FirstCopy(beam.CombineFn):
    def create_accumulator(self) -> Copies | None:
        return None

    def add_input(self, copies: Copies | None, position: Position) -> Copies:
        if copies is None:
            return Copies(position, 1)
        return Copies(min(copies.first, position), copies.count + 1)

    def merge_accumulators(self, accumulators: Iterable[Copies | None]) -> Copies | None:
        present = [a for a in accumulators if a is not None]
        if not present:
            return None
        return Copies(min(a.first for a in present), sum(a.count for a in present))

    def extract_output(self, copies: Copies) -> Copies:
        return copies


class Capped(NamedTuple):
    """A sentence's kept references as (position, French), in file order, and how many of
    its distinct references the cap left out."""
    references: list[tuple[Position, str]]
    dropped: int


class SmallestHashReferences(beam.CombineFn):
    """The `cap` distinct references with the smallest `reference_hash`.

    Accumulator: (count of references seen, heap of at most `cap` of them as
    (-hash, French, position)), so its size is bounded whatever comes in.
    """

    def __init__(self, cap: int) -> None:
        self._cap = cap

    def create_accumulator(self) -> tuple[int, list]:
        return 0, []

    def _push(self, heap: list, entry: tuple) -> None:
        if len(heap) < self._cap:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:  # smaller hash than the largest kept one
            heapq.heapreplace(heap, entry)

    def add_input(self, accumulator: tuple[int, list], reference: tuple[str, Position]
                  ) -> tuple[int, list]:
        seen, heap = accumulator
        french, position = reference
        # Negated so that heap[0] holds the largest hash: the first to go.
        self._push(heap, (-reference_hash(french), french, position))
        return seen + 1, heap

    def merge_accumulators(self, accumulators: Iterable[tuple[int, list]]) -> tuple[int, list]:
        seen, heap = 0, []
        for other_seen, other in accumulators:
            seen += other_seen
            for entry in other:
                self._push(heap, entry)
        return seen, heap

    def extract_output(self, accumulator: tuple[int, list]) -> Capped:
        seen, heap = accumulator
        return Capped(sorted((position, french) for _, french, position in heap),
                      seen - len(heap))


@beam.ptransform_fn
def GroupReferences(pairs: beam.pvalue.PCollection, max_references: int
                    ) -> tuple[beam.pvalue.PCollection, beam.pvalue.PCollection]:
    """((English, French), Position) -> ((English, Capped), duplicate copies per pair)."""
    copies = pairs | "CollapseDuplicates" >> beam.CombinePerKey(_FirstCopy())
    duplicates = copies | "DuplicateCopies" >> beam.MapTuple(lambda _, c: c.count - 1)
    grouped = (copies
               | "KeyByEnglish" >> beam.MapTuple(
                   lambda pair, c: (pair[0], (pair[1], c.first)))
               | "CapReferences" >> beam.CombinePerKey(SmallestHashReferences(max_references)))
    return grouped, duplicates
