"""Kept pairs -> the French references of each English sentence: identical pairs once, at most
`max_references` per sentence, chosen the same way on any number of workers.

Both steps are Beam combines, so workers pre-combine before the shuffle and no worker ever
holds all the references of a sentence seen 10,000 times: a pair's copies become one
(first position, count), a sentence's references the `max_references` smallest by hash.
"""
from __future__ import annotations

import bisect
import hashlib
from typing import Iterable, NamedTuple

import apache_beam as beam

# Where a pair was read: (file, byte offset), so references keep their file order. ExampleGen
# numbers the files by path, spans by span number (source.ReadPairs); any sortable value works.
Position = tuple


def reference_digest(french: str) -> bytes:
    """The same on every worker and run (Python's hash() of a str is salted per process);
    all 256 bits, so two distinct references never tie. Bytes sort as the number does."""
    return hashlib.sha256(french.encode("utf-8")).digest()


def reference_hash(french: str) -> int:
    """`reference_digest` as a number."""
    return int.from_bytes(reference_digest(french), "big")


# A pair's copies: (the first one's position, how many). Plain tuples, as every accumulator
# here: Beam encodes them between workers without pickling.
Copies = tuple


class _FirstCopy(beam.CombineFn):
    def create_accumulator(self) -> Copies | None:
        return None

    def add_input(self, copies: Copies | None, position: Position) -> Copies:
        if copies is None:
            return position, 1
        first, count = copies
        return (position if position < first else first), count + 1

    def merge_accumulators(self, accumulators: Iterable[Copies | None]) -> Copies | None:
        merged = None
        for copies in accumulators:
            if copies is None:
                continue
            if merged is None:
                merged = copies
            else:
                merged = min(merged[0], copies[0]), merged[1] + copies[1]
        return merged

    def extract_output(self, copies: Copies) -> Copies:
        return copies


class Capped(NamedTuple):
    """A sentence's kept references as (position, French), in file order, and how many of
    its distinct references the cap left out."""
    references: list[tuple[Position, str]]
    dropped: int


class SmallestHashReferences(beam.CombineFn):
    """The `cap` distinct references with the smallest `reference_hash`.

    Accumulator: (count of references seen, at most `cap` of them), so its size is bounded
    whatever comes in. Up to `cap` references seen, they are all kept, whatever their hash,
    and none is hashed: as (French, position). Past the cap, they are
    (reference_digest, French, position), sorted, the largest digest the first to go.
    The inputs are distinct references (duplicates collapsed before).
    """

    def __init__(self, cap: int) -> None:
        self._cap = cap

    def create_accumulator(self) -> tuple[int, list]:
        return 0, []

    @staticmethod
    def _hashed(entries: list) -> list:
        return [(reference_digest(french), french, position) for french, position in entries]

    def add_input(self, accumulator: tuple[int, list], reference: tuple[str, Position]
                  ) -> tuple[int, list]:
        seen, kept = accumulator
        seen += 1
        if seen <= self._cap:
            kept.append(reference)
            return seen, kept
        if seen == self._cap + 1:  # the first one over the cap: now it is the hashes
            kept = sorted(self._hashed(kept))
        french, position = reference
        entry = (reference_digest(french), french, position)
        if entry < kept[-1]:
            bisect.insort(kept, entry)
            kept.pop()
        return seen, kept

    def merge_accumulators(self, accumulators: Iterable[tuple[int, list]]) -> tuple[int, list]:
        accumulators = list(accumulators)
        seen = sum(other_seen for other_seen, _ in accumulators)
        if seen <= self._cap:
            return seen, [entry for _, kept in accumulators for entry in kept]
        merged = []
        for other_seen, kept in accumulators:
            merged.extend(kept if other_seen > self._cap else self._hashed(kept))
        merged.sort()
        del merged[self._cap:]
        return seen, merged

    def extract_output(self, accumulator: tuple[int, list]) -> Capped:
        seen, kept = accumulator
        if seen <= self._cap:
            return Capped(sorted((position, french) for french, position in kept), 0)
        return Capped(sorted((position, french) for _, french, position in kept),
                      seen - len(kept))


class _KeyByEnglish(beam.DoFn):
    """((English, French), Copies) -> (English, (French, first position)); the extra copies
    are added up per bundle and output once, under DUPLICATES."""

    def start_bundle(self) -> None:
        self._duplicates = 0

    def process(self, element):
        (english, french), (first, count) = element
        self._duplicates += count - 1
        yield english, (french, first)

    def finish_bundle(self):
        if self._duplicates:
            yield beam.pvalue.TaggedOutput(
                DUPLICATES, beam.transforms.window.GlobalWindows.windowed_value(
                    self._duplicates))


DUPLICATES = "duplicates"


@beam.ptransform_fn
def GroupReferences(pairs: beam.pvalue.PCollection, max_references: int
                    ) -> tuple[beam.pvalue.PCollection, beam.pvalue.PCollection]:
    """((English, French), Position) -> ((English, Capped), numbers of duplicate copies:
    their sum is the pairs read more than once)."""
    keyed = (pairs
             | "CollapseDuplicates" >> beam.CombinePerKey(_FirstCopy())
             | "KeyByEnglish" >> beam.ParDo(_KeyByEnglish()).with_outputs(
                 DUPLICATES, main="references"))
    grouped = keyed.references | "CapReferences" >> beam.CombinePerKey(
        SmallestHashReferences(max_references))
    return grouped, keyed[DUPLICATES]
