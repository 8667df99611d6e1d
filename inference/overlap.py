"""The training-overlap check of `nmt evaluate`: which test sentences the model trained on.

A test line is *seen* when its English sentence is one of the model's training sentences (the
train split ExampleGen wrote, found through ML Metadata lineage), either exactly or after
`normalize`; scores of seen lines measure memory, those of unseen lines translation.
"""
from __future__ import annotations

import dataclasses
import unicodedata
from typing import Iterable

# What `normalize` does, as `nmt evaluate` reports it.
NORMALIZATION = ("NFKC, case folded, apostrophes dropped, other punctuation made spaces, "
                 "spacing collapsed")


class _PunctuationTable(dict):
    """str.translate's table for `normalize`: typographic and plain apostrophes dropped, every
    other punctuation character (Unicode category P) a space, the rest kept. A character's
    category is looked up at its first sight, so the translation runs in C: a Python loop
    over every character of the train split's sentences was most of the overlap check."""

    def __missing__(self, code: int) -> int | str:
        self[code] = " " if unicodedata.category(chr(code)).startswith("P") else code
        return self[code]


_PUNCTUATION = _PunctuationTable({ord(c): None for c in "'\u2019\u2018\u02bc`"})


def normalize(sentence: str) -> str:
    """The form two near-copies share: Unicode NFKC, case folded, typographic apostrophes
    made plain and dropped, every other punctuation character (Unicode category P) a space,
    spacing collapsed. "He's not in." and "hes NOT in!" are one sentence; "He is not in." is
    another (contractions are not expanded)."""
    return " ".join(unicodedata.normalize("NFKC", sentence).casefold()
                    .translate(_PUNCTUATION).split())


@dataclasses.dataclass(frozen=True)
class Overlap:
    """Per test line: is its English sentence in training, exactly, and after `normalize`."""
    exact: list[bool]
    normalized: list[bool]
    training_sentences: int  # distinct English sentences in the train split

    @property
    def seen(self) -> list[bool]:
        """What `nmt evaluate` scores apart: seen after normalization (exact matches too)."""
        return self.normalized


def find(sources: list[str], training: Iterable[str]) -> Overlap:
    """Which of `sources` occur among the `training` English sentences."""
    exact_set = set(training)
    normalized_set = {normalize(s) for s in exact_set}
    exact = [s in exact_set for s in sources]
    normalized = [e or normalize(s) in normalized_set for s, e in zip(sources, exact)]
    return Overlap(exact, normalized, len(exact_set))
