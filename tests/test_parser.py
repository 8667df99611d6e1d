"""fra.txt line parsing: every kind of bad line is rejected, counted and located."""
from __future__ import annotations

import io

import pytest

from components.fra_example_gen import parser


def parse_bytes(data: bytes, max_line_bytes: int = 100) -> list[parser.ParsedLine]:
    return list(parser.parse_stream(io.BytesIO(data), max_line_bytes))


@pytest.mark.parametrize("raw, reason", [
    (b"\n", parser.BLANK_LINE),
    (b"   \t  \r\n", parser.BLANK_LINE),
    (b"Go." + b"o" * 200 + b"\tVa !\n", parser.TOO_LONG),
    (b"Go.\x00\tVa !\n", parser.NUL_BYTE),
    (b"Go.\tVa \xff\xfe!\n", parser.INVALID_UTF8),
    (b"Go. Va !\n", parser.NO_TAB),
    (b"Go.\tVa !\tCC-BY\textra\n", parser.TOO_MANY_COLUMNS),
    (b"\tVa !\n", parser.EMPTY_ENGLISH),
    (b"  \tVa !\n", parser.EMPTY_ENGLISH),
    (b"Go.\t\n", parser.EMPTY_FRENCH),
    (b"Go.\t \tCC-BY\n", parser.EMPTY_FRENCH),
])
def test_bad_line_is_rejected_with_its_reason(raw, reason):
    parsed = parser.parse_line(raw, max_line_bytes=100)
    assert parsed.reason == reason
    assert not parsed.kept


def test_good_lines_keep_text_exactly_as_written():
    lines = parse_bytes("\ufeffGo.\tVa !\r\nI'm OK.\tÇa va\u202f!\tCC-BY 2.0 (France)\n"
                        "  Spaces kept  \t  Espaces  \n".encode())
    assert [(p.english, p.french) for p in lines] == [
        ("Go.", "Va !"),  # BOM and CRLF removed, nothing else
        ("I'm OK.", "Ça va\u202f!"),  # attribution column ignored, no normalization
        ("  Spaces kept  ", "  Espaces  ")]
    assert all(p.kept for p in lines)


def test_bom_is_only_stripped_on_the_first_line():
    lines = parse_bytes(b"Go.\tVa !\n\xef\xbb\xbfHi.\tSalut !\n")
    assert lines[1].english == "\ufeffHi."


def located(data: bytes, range_bytes: int) -> list[tuple[parser.ParsedLine, int, int, int]]:
    """Each line with its range's start, its rank there and its offset, as ranges of
    `range_bytes` read it (source.ReadLines)."""
    lines, offset, ranks = [], 0, {}
    for line in data.splitlines(keepends=True):
        chunk = offset // range_bytes * range_bytes
        ranks[chunk] = ranks.get(chunk, -1) + 1
        lines.append((parser.parse_line(line, 100, offset == 0), chunk, ranks[chunk], offset))
        offset += len(line)
    return lines


def test_report_counts_every_line_once_with_sample_line_numbers():
    data = (b"Go.\tVa !\n\nno tab here\nHi.\tSalut !\n\n\n\tVide\n" * 3)
    report = parser.ParseReport(max_samples=2)
    for line in located(data, 16):
        report.add(*line)
    assert report.lines_read == 21
    assert report.pairs_kept == 6
    assert report.rejected == {parser.BLANK_LINE: 9, parser.NO_TAB: 3, parser.EMPTY_ENGLISH: 3}
    assert report.lines_read == report.pairs_kept + report.lines_rejected
    assert report.to_dict()["rejected_by_reason"][parser.BLANK_LINE]["sample_line_numbers"] \
        == [2, 5]
    assert report.to_dict()["rejected_by_reason"][parser.NO_TAB] == {
        "count": 3, "sample_line_numbers": [3, 10], "sample_byte_offsets": [10, 52]}


def test_reports_merge_like_one_pass_whatever_the_ranges():
    data = b"a\tb\n\nc\n\td\ne\tf\n\n" * 4
    whole = parser.ParseReport()
    for line in located(data, len(data)):
        whole.add(*line)
    left, right = parser.ParseReport(), parser.ParseReport()
    lines = located(data, 7)
    for line in lines[::2]:
        left.add(*line)
    for line in lines[1::2]:
        right.add(*line)
    assert right.merge(left).to_dict() == whole.to_dict()


class Chunks:
    """A binary stream that hands out at most `size` bytes per read, like a slow pipe."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def read(self, n: int) -> bytes:
        n = min(n, self.size)
        self.at += n
        return self.data[self.at - n:self.at]


@pytest.mark.parametrize("block", [1, 3, 7, 4096])
def test_streamed_lines_are_the_lines_whatever_the_block_size(block):
    data = "\ufeffGo.\tVa !\r\n\nI'm OK.\tÇa va.\nno newline at the end\tfin".encode()
    lines = list(parser.read_lines(Chunks(data, block), max_line_bytes=100, block_bytes=block))
    assert lines == [(len(line), line) for line in data.splitlines(keepends=True)]


def test_a_huge_line_is_cut_short_and_still_rejected_as_too_long():
    huge = b"\xef\xbb\xbf" + b" " * 10_000 + b"x\tlong\r\n"  # BOM, blank start, CRLF
    data = huge + b"Go.\tVa !\n" + b"y" * 5000
    lines = list(parser.read_lines(Chunks(data, 1000), max_line_bytes=50, block_bytes=1000))
    assert [len(line) for _, line in lines] == [56, 9, 56]  # never more than the limit + 6
    assert [length for length, _ in lines] == [len(huge), 9, 5000]  # where the next one starts
    parsed = [parser.parse_line(line, 50, file_start=i == 0) for i, (_, line) in enumerate(lines)]
    assert [p.reason for p in parsed] == [parser.TOO_LONG, None, parser.TOO_LONG]
    assert parsed[1].english == "Go."


@pytest.mark.parametrize("start, limit, skipped", [
    (0, 100, 4), (3, 100, 1), (4, 100, 6), (10, 100, 3),  # 3: to the end of the file
    (4, 6, 6), (4, 5, None)])  # None: the line runs past the limit
def test_skip_line_reads_through_the_end_of_the_line(start, limit, skipped):
    stream = io.BytesIO(b"abc\nhello\nxyz")
    stream.seek(start)
    assert parser.skip_line(stream, limit, block_bytes=2) == skipped


def test_an_empty_zip_or_misnamed_gzip_file_is_refused_by_its_first_bytes():
    with pytest.raises(parser.InputDataError, match="is empty"):
        parser.check_file_start("in.txt", b"")
    with pytest.raises(parser.InputDataError, match=r"is gzip-compressed.*in.txt.gz"):
        parser.check_file_start("in.txt", b"\x1f\x8b\x08\x00")
    with pytest.raises(parser.InputDataError, match=r"named .gz but is not gzip"):
        parser.check_file_start("in.txt.gz", b"Go.\tVa")
    with pytest.raises(parser.InputDataError, match=r"zip-compressed.*unzip in.zip"):
        parser.check_file_start("in.zip", b"PK\x03\x04")
    parser.check_file_start("in.txt", b"Go.\tVa")  # text passes
    parser.check_file_start("in.txt.gz", b"\x1f\x8b\x08\x00")  # and gzip named so
