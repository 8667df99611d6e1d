"""Line parsing for fra.txt: every line is either kept as a pair or rejected with a reason.

Pure Python so it can be unit-tested line by line; the Beam transform only wires it up.
Text is kept exactly as written (no normalization): Transform normalizes, so that serving
runs the very same code.
"""
from __future__ import annotations

import dataclasses
from typing import BinaryIO, Callable, Iterator

UTF8_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_LINE_BYTES = 2048
# French references kept per English sentence (fra.txt has at most 32); schemas/schema.pbtxt's
# `french` value_count max is the same (tests/test_references.py checks).
DEFAULT_MAX_REFERENCES = 64
READ_BLOCK_BYTES = 1 << 20
# What a compressed file starts with: gzip is read (when named .gz), zip is refused.
GZIP_MAGIC, ZIP_MAGIC = b"\x1f\x8b", b"PK\x03\x04"
GZIP_SUFFIX = ".gz"

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
    """Refuses an empty file, a zip archive, or a gzip file not named .gz (Beam reads only
    those as gzip) from its first bytes, before any parsing."""
    if not head:
        raise InputDataError(f"The input file {path} is empty (0 bytes): expected "
                             "English<TAB>French lines.")
    gzipped = head.startswith(GZIP_MAGIC)
    if path.endswith(GZIP_SUFFIX) and not gzipped:
        raise InputDataError(f"The input file {path} is named {GZIP_SUFFIX} but is not "
                             "gzip-compressed: rename it.")
    if gzipped and not path.endswith(GZIP_SUFFIX):
        raise InputDataError(f"The input file {path} is gzip-compressed, not text: name it "
                             f"{path}{GZIP_SUFFIX} to have it read compressed, or extract it "
                             f"(e.g. `gunzip -k {path}`).")
    if head.startswith(ZIP_MAGIC):
        raise InputDataError(f"The input file {path} is zip-compressed, not text: extract "
                             f"fra.txt first (e.g. `unzip {path}`) and pass that file.")


def check_input(files: list[tuple[str, int]], read_head: Callable[[str], bytes],
                pattern: str) -> None:
    """Refuses an input that matches no file, only empty files, or a file that is not text
    (see check_file_start); `files` are (path, size), `read_head` gives a file's first bytes.
    An empty file among others is fine (an empty shard of a sharded export)."""
    if not files:
        raise InputDataError(f"No input file matches {pattern}.")
    if len(files) > 1 and not any(size for _, size in files):
        raise InputDataError(f"Every file matching {pattern} is empty (0 bytes).")
    for path, size in files:
        if size or len(files) == 1:
            check_file_start(path, read_head(path))


@dataclasses.dataclass(frozen=True)
class ParsedLine:
    """One input line: `reason` is None for a kept pair, else why the line was rejected."""
    english: str = ""
    french: str = ""
    reason: str | None = None

    @property
    def kept(self) -> bool:
        return self.reason is None


def parse_fields(raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 file_start: bool = False) -> tuple[str, str] | str:
    """`parse_line` without the object: (English, French) for a kept pair, else the reason
    (a str). What ExampleGen's reader calls on every line."""
    line = raw.rstrip(b"\n").rstrip(b"\r")
    if file_start and line.startswith(UTF8_BOM):
        line = line[len(UTF8_BOM):]
    if len(line) > max_line_bytes:  # first: read_lines only keeps the start of such a line
        return TOO_LONG
    if not line.strip():
        return BLANK_LINE
    if b"\x00" in line:
        return NUL_BYTE
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return INVALID_UTF8
    columns = text.split("\t")
    if len(columns) < MIN_COLUMNS:
        return NO_TAB
    if len(columns) > MAX_COLUMNS:
        return TOO_MANY_COLUMNS
    english, french = columns[0], columns[1]
    if not english.strip():
        return EMPTY_ENGLISH
    if not french.strip():
        return EMPTY_FRENCH
    return english, french


def parse_line(raw: bytes, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               file_start: bool = False) -> ParsedLine:
    """Classifies one raw line (with or without its line terminator); a BOM is removed only
    from the line at the start of a file."""
    fields = parse_fields(raw, max_line_bytes, file_start)
    if fields.__class__ is str:
        return ParsedLine(reason=fields)
    return ParsedLine(english=fields[0], french=fields[1])


def read_lines(stream: BinaryIO, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
               block_bytes: int = READ_BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(length in bytes, raw line) of each line of a binary stream, read in blocks so that
    memory stays bounded.

    A line longer than the limit is yielded cut to its first `max_line_bytes` + 6 bytes:
    enough for `parse_line` to reject it as too long even after removing a BOM and a CR,
    without ever holding a 2 GB line in memory. Its length is the whole line's, so that the
    caller knows where the next line starts.
    """
    room = max_line_bytes + len(UTF8_BOM) + len(b"\r\n") + 1
    line, length = bytearray(), 0
    while block := stream.read(block_bytes):
        start = 0
        while True:
            end = block.find(b"\n", start)
            if not length and 0 <= end < start + room:  # the whole line is in this block
                yield end + 1 - start, block[start:end + 1]
                start = end + 1
                continue
            stop = len(block) if end < 0 else end + 1
            if len(line) < room:
                line += block[start:min(stop, start + room - len(line))]
            length += stop - start
            if end < 0:
                break
            yield length, bytes(line)
            line.clear()
            length = 0
            start = stop
    if length:
        yield length, bytes(line)


def skip_line(stream: BinaryIO, limit: int,
              block_bytes: int = READ_BLOCK_BYTES) -> int | None:
    """How many bytes from the stream's position through the end of its line (or file), or
    None if that is more than `limit` bytes; the stream is left somewhere after, for the
    caller to seek."""
    skipped = 0
    while skipped < limit and (block := stream.read(min(block_bytes, limit - skipped))):
        end = block.find(b"\n")
        if end >= 0:
            return skipped + end + 1
        skipped += len(block)
    return None if skipped >= limit else skipped


def parse_stream(stream: BinaryIO,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[ParsedLine]:
    """Every line of one whole file, in order (for benchmarks and tests; ExampleGen reads
    through Beam, source.ReadLines)."""
    for number, (_, raw) in enumerate(read_lines(stream, max_line_bytes)):
        yield parse_line(raw, max_line_bytes, file_start=number == 0)


@dataclasses.dataclass
class ParseReport:
    """One file's counts of kept and rejected lines, with where the first rejected lines of
    each reason are; invariant: lines_read == pairs_kept + lines_rejected.

    Mergeable, so Beam can build it on any number of workers, each reading ranges of the file.
    A line is located by its range (`chunk`, where the range starts) and its rank there: with
    every range's line count, that is its line number, without reading the file again.
    """
    max_samples: int = 5
    lines_read: int = 0
    pairs_kept: int = 0
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)
    # reason -> the first rejected lines as (byte offset, chunk, rank in the chunk)
    samples: dict[str, list[tuple[int, int, int]]] = dataclasses.field(default_factory=dict)
    chunk_lines: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def lines_rejected(self) -> int:
        return sum(self.rejected.values())

    def add(self, parsed: ParsedLine, chunk: int = 0, index: int = 0,
            offset: int = 0) -> "ParseReport":
        self.lines_read += 1
        self.chunk_lines[chunk] = self.chunk_lines.get(chunk, 0) + 1
        if parsed.kept:
            self.pairs_kept += 1
        else:
            self.rejected[parsed.reason] = self.rejected.get(parsed.reason, 0) + 1
            self._add_samples(parsed.reason, [(offset, chunk, index)])
        return self

    def add_range(self, chunk: int, lines: int, kept: int) -> "ParseReport":
        """`lines` lines of the range starting at `chunk`, `kept` of them pairs: what a reader
        adds once per range (the rejected ones also one by one, with `reject`)."""
        self.lines_read += lines
        self.pairs_kept += kept
        if lines:
            self.chunk_lines[chunk] = self.chunk_lines.get(chunk, 0) + lines
        return self

    def reject(self, reason: str, chunk: int, index: int, offset: int) -> "ParseReport":
        """A rejected line's reason and place; it is counted as read by `add_range`."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self._add_samples(reason, [(offset, chunk, index)])
        return self

    def merge(self, other: "ParseReport") -> "ParseReport":
        self.lines_read += other.lines_read
        self.pairs_kept += other.pairs_kept
        for chunk, count in other.chunk_lines.items():
            self.chunk_lines[chunk] = self.chunk_lines.get(chunk, 0) + count
        for reason, count in other.rejected.items():
            self.rejected[reason] = self.rejected.get(reason, 0) + count
            self._add_samples(reason, other.samples.get(reason, []))
        return self

    def _add_samples(self, reason: str, samples: list[tuple[int, int, int]]) -> None:
        merged = sorted(set(self.samples.get(reason, [])) | set(samples))
        self.samples[reason] = merged[:self.max_samples]

    def line_number(self, chunk: int, index: int) -> int:
        """1-based, as an editor shows it: the lines of all earlier ranges, plus the rank."""
        return 1 + index + sum(n for start, n in self.chunk_lines.items() if start < chunk)

    def to_dict(self) -> dict:
        return {
            "lines_read": self.lines_read,
            "pairs_kept": self.pairs_kept,
            "lines_rejected": self.lines_rejected,
            "rejected_by_reason": {
                reason: {"count": self.rejected[reason],
                         "sample_line_numbers": [self.line_number(chunk, index)
                                                 for _, chunk, index in self.samples[reason]],
                         "sample_byte_offsets": [offset for offset, _, _ in self.samples[reason]]}
                for reason in sorted(self.rejected)},
        }


def total_report(files: dict[str, dict], max_samples: int = 5) -> dict:
    """The files' `ParseReport.to_dict()`s added up; each reason's samples name their file."""
    rejected: dict[str, dict] = {}
    for path, report in sorted(files.items()):
        for reason, info in report["rejected_by_reason"].items():
            total = rejected.setdefault(reason, {"count": 0, "samples": []})
            total["count"] += info["count"]
            total["samples"].extend(
                {"file": path, "line": line, "byte_offset": offset}
                for line, offset in zip(info["sample_line_numbers"], info["sample_byte_offsets"]))
            del total["samples"][max_samples:]
    return {
        "lines_read": sum(r["lines_read"] for r in files.values()),
        "pairs_kept": sum(r["pairs_kept"] for r in files.values()),
        "lines_rejected": sum(r["lines_rejected"] for r in files.values()),
        "rejected_by_reason": dict(sorted(rejected.items())),
        "files": files,
    }
