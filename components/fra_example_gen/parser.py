"""Line parsing for fra.txt: every line is either kept as a pair or rejected with a reason.

Pure Python so it can be unit-tested line by line; the Beam transform only wires it up.
Text is kept exactly as written (no normalization): Transform normalizes, so that serving
runs the very same code.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

UTF8_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_LINE_BYTES = 2048

# Why a line was rejected, in the order the checks run.
BLANK_LINE = "blank_line"
TOO_LONG = "too_long"
NUL_BYTE = "nul_byte"
INVALID_UTF8 = "invalid_utf8"
NO_TAB = "no_tab"
TOO_MANY_COLUMNS = "too_many_columns"
EMPTY_ENGLISH = "empty_english"
EMPTY_FRENCH = "empty_french"
REJECT_REASONS = (BLANK_LINE, TOO_LONG, NUL_BYTE, INVALID_UTF8, NO_TAB, TOO_MANY_COLUMNS,
                  EMPTY_ENGLISH, EMPTY_FRENCH)

# English<TAB>French, optionally followed by the attribution column of newer files.
MIN_COLUMNS, MAX_COLUMNS = 2, 3


@dataclasses.dataclass(frozen=True)
class ParsedLine:
    """One input line: `reason` is None for a kept pair, else why the line was rejected."""
    line_number: int  # 1-based, as an editor shows it
    english: str = ""
    french: str = ""
    reason: str | None = None

    @property
    def kept(self) -> bool:
        return self.reason is None


def parse_line(raw: bytes, line_number: int,
               max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> ParsedLine:
    """Classifies one raw line (with or without its line terminator)."""
    line = raw.rstrip(b"\n").rstrip(b"\r")
    if line_number == 1 and line.startswith(UTF8_BOM):
        line = line[len(UTF8_BOM):]
    if not line.strip():
        return ParsedLine(line_number, reason=BLANK_LINE)
    if len(line) > max_line_bytes:
        return ParsedLine(line_number, reason=TOO_LONG)
    if b"\x00" in line:
        return ParsedLine(line_number, reason=NUL_BYTE)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return ParsedLine(line_number, reason=INVALID_UTF8)
    columns = text.split("\t")
    if len(columns) < MIN_COLUMNS:
        return ParsedLine(line_number, reason=NO_TAB)
    if len(columns) > MAX_COLUMNS:
        return ParsedLine(line_number, reason=TOO_MANY_COLUMNS)
    english, french = columns[0], columns[1]
    if not english.strip():
        return ParsedLine(line_number, reason=EMPTY_ENGLISH)
    if not french.strip():
        return ParsedLine(line_number, reason=EMPTY_FRENCH)
    return ParsedLine(line_number, english=english, french=french)


def parse_lines(lines: Iterable[bytes],
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[ParsedLine]:
    """Parses raw lines numbered from 1."""
    for number, raw in enumerate(lines, start=1):
        yield parse_line(raw, number, max_line_bytes)


@dataclasses.dataclass
class ParseReport:
    """Counts of kept and rejected lines; invariant: lines_read == pairs_kept + lines_rejected.

    Mergeable, so Beam can build it on any number of workers.
    """
    max_samples: int = 5
    lines_read: int = 0
    pairs_kept: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    samples: dict[str, list[int]] = dataclasses.field(default_factory=dict)

    @property
    def lines_rejected(self) -> int:
        return sum(self.rejected.values())

    def add(self, parsed: ParsedLine) -> "ParseReport":
        self.lines_read += 1
        if parsed.kept:
            self.pairs_kept += 1
        else:
            self.rejected[parsed.reason] = self.rejected.get(parsed.reason, 0) + 1
            self._add_samples(parsed.reason, [parsed.line_number])
        return self

    def merge(self, other: "ParseReport") -> "ParseReport":
        self.lines_read += other.lines_read
        self.pairs_kept += other.pairs_kept
        for reason, count in other.rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + count
            self._add_samples(reason, other.samples.get(reason, []))
        return self

    def _add_samples(self, reason: str, line_numbers: list[int]) -> None:
        merged = sorted(set(self.samples.get(reason, [])) | set(line_numbers))
        self.samples[reason] = merged[:self.max_samples]

    def to_dict(self) -> dict:
        return {
            "lines_read": self.lines_read,
            "pairs_kept": self.pairs_kept,
            "lines_rejected": self.lines_rejected,
            "rejected_by_reason": {
                reason: {"count": self.rejected[reason], "sample_line_numbers": self.samples[reason]}
                for reason in sorted(self.rejected)},
        }
