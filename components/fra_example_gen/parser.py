"""Line parsing for fra.txt: every line is either kept as a pair or rejected with a reason.

Pure Python so it can be unit-tested line by line; the Beam transform only wires it up.
Text is kept exactly as written (no normalization): Transform normalizes, so that serving
runs the very same code.
"""
from __future__ import annotations

import dataclasses
from typing import BinaryIO, Iterable, Iterator

UTF8_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_LINE_BYTES = 2048
READ_BLOCK_BYTES = 1 << 20
# What a compressed file starts with: fra.txt must be given as plain text.
COMPRESSED_MAGIC = {b"\x1f\x8b": ("gzip", "gunzip -k"), b"PK\x03\x04": ("zip", "unzip")}

# Why a line was rejected, in the order the checks run.
TOO_LONG = "too_long"
BLANK_LINE = "blank_line"
NUL_BYTE = "nul_byte"
INVALID_UTF8 = "invalid_utf8"
NO_TAB = "no_tab"
TOO_MANY_COLUMNS = "too_many_columns"
EMPTY_ENGLISH = "empty_english"
EMPTY_FRENCH = "empty_french"
REJECT_REASONS = (TOO_LONG, BLANK_LINE, NUL_BYTE, INVALID_UTF8, NO_TAB, TOO_MANY_COLUMNS,
                  EMPTY_ENGLISH, EMPTY_FRENCH)

# English<TAB>French, optionally followed by the attribution column of newer files.
MIN_COLUMNS, MAX_COLUMNS = 2, 3


class InputDataError(ValueError):
    """The input cannot give any training data; the message names the file and the problem."""


def check_file_start(path: str, head: bytes) -> None:
    """Refuses an empty or compressed input from its first bytes, before any parsing."""
    if not head:
        raise InputDataError(f"The input file {path} is empty (0 bytes): expected "
                             "English<TAB>French lines.")
    for magic, (kind, command) in COMPRESSED_MAGIC.items():
        if head.startswith(magic):
            raise InputDataError(f"The input file {path} is {kind}-compressed, not text: "
                                 f"extract fra.txt first (e.g. `{command} {path}`) and pass "
                                 "that file.")


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
    if len(line) > max_line_bytes:  # first: read_lines only keeps the start of such a line
        return ParsedLine(line_number, reason=TOO_LONG)
    if not line.strip():
        return ParsedLine(line_number, reason=BLANK_LINE)
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


def read_lines(stream: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               block_bytes: int = READ_BLOCK_BYTES) -> Iterator[bytes]:
    """The raw lines of a binary stream, read in blocks so that memory stays bounded.

    A line longer than the limit is yielded cut to its first `max_line_bytes` + 6 bytes:
    enough for `parse_line` to reject it as too long even after removing a BOM and a CR,
    without ever holding a 2 GB line in memory.
    """
    room = max_line_bytes + len(UTF8_BOM) + len(b"\r\n") + 1
    line = bytearray()
    while block := stream.read(block_bytes):
        start = 0
        while True:
            end = block.find(b"\n", start)
            stop = len(block) if end < 0 else end + 1
            if len(line) < room:
                line += block[start:min(stop, start + room - len(line))]
            if end < 0:
                break
            yield bytes(line)
            line.clear()
            start = stop
    if line:
        yield bytes(line)


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
