"""A test set for `nmt evaluate`: English sources with one or more French references per line,
from aligned plain-text files (sacreBLEU's layout) or a Tatoeba Challenge TSV.

Everything is read and checked before a model is loaded, and a bad file stops the command
with one error naming the file and the line: a file that is empty, is not UTF-8, has a number
of lines unlike the source's, or (TSV) a row with other columns than the first.
"""
from __future__ import annotations

import dataclasses
import os

# The Tatoeba Challenge's test files: source language, target language, source, reference.
TSV_COLUMNS = (4, 2)
SOURCE_LANGUAGE = "eng"


class EvaluationSetError(ValueError):
    """The test set cannot be scored as given; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class EvaluationSet:
    name: str  # how the command names it: the source file, or the TSV
    sources: list[str]
    references: list[list[str]]  # sacreBLEU's streams: references[k][i] of source i

    @property
    def num_refs(self) -> int:
        return len(self.references)


def _lines(path: str) -> list[str]:
    """The file's lines without their line ends, as sacreBLEU's command line reads them."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:
        raise EvaluationSetError(f"{path}: cannot be read ({err.strerror}).") from None
    if not data.strip():
        raise EvaluationSetError(f"{path}: the file is empty.")
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the last line's end
        lines.pop()
    texts = []
    for number, raw in enumerate(lines, start=1):
        try:
            texts.append(raw.decode("utf-8").removesuffix("\r"))
        except UnicodeDecodeError as err:
            raise EvaluationSetError(f"{path}, line {number}: not valid UTF-8 ({err.reason} "
                                     f"at byte {err.start + 1} of the line).") from None
    return texts


def _check_sources(path: str, sources: list[str], first_line: int = 1) -> None:
    for number, source in enumerate(sources, start=first_line):
        if not source.strip():
            raise EvaluationSetError(f"{path}, line {number}: the English sentence is empty.")


def read_aligned(source: str, references: list[str]) -> EvaluationSet:
    """`source` and each of `references`: one sentence per line, line i of each aligned."""
    if not references:
        raise EvaluationSetError("give at least one --reference file with --source.")
    sources = _lines(source)
    _check_sources(source, sources)
    streams = []
    for path in references:
        lines = _lines(path)
        if len(lines) != len(sources):
            raise EvaluationSetError(f"{path} has {len(lines):,} lines and {source} has "
                               f"{len(sources):,}: line i of every file must be the same "
                               f"sentence (first line past the shorter file: "
                               f"{min(len(lines), len(sources)) + 1}).")
        streams.append(lines)
    return EvaluationSet(os.path.basename(source), sources, streams)


def read_tsv(path: str) -> EvaluationSet:
    """A Tatoeba Challenge file (`eng fra source reference`), or `source reference` rows."""
    rows = [line.split("\t") for line in _lines(path)]
    width = len(rows[0])
    if width not in TSV_COLUMNS:
        raise EvaluationSetError(f"{path}, line 1: {width} tab-separated columns; a test set has 4 "
                           "(eng, fra, English sentence, French reference) or 2 (English, "
                           "French).")
    for number, row in enumerate(rows, start=1):
        if len(row) != width:
            raise EvaluationSetError(f"{path}, line {number}: {len(row)} tab-separated columns, "
                               f"where line 1 has {width}.")
        if width == 4 and not row[0].startswith(SOURCE_LANGUAGE):
            raise EvaluationSetError(f"{path}, line {number}: the source language is {row[0]!r}; "
                               f"this model translates from English ({SOURCE_LANGUAGE}).")
    sources = [row[-2] for row in rows]
    _check_sources(path, sources)
    return EvaluationSet(os.path.basename(path), sources, [[row[-1] for row in rows]])
