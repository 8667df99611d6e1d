"""The input files and their lines, read by Beam: many files in parallel, a large plain file
as several byte ranges (gzip whole), local or on an object store (Beam's FileSystems).

Beam's FileBasedSource does the matching, splitting into ranges and decompression; the lines
are cut here rather than by Beam's text source for two reasons: its lines are held whole in
memory (a 2 GB line would be), and it does not say where a line starts, which the parse report
needs to name a rejected line.
"""
from __future__ import annotations

import os
from typing import Iterator, NamedTuple

import apache_beam as beam
from apache_beam.io import filebasedsource
from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems

from components.fra_example_gen import parser

# Ranges of this size are read by different workers (Beam's ReadAllFromText default).
DEFAULT_RANGE_BYTES = 64 << 20


class Line(NamedTuple):
    """One raw line. `chunk` (where its range starts) and `index` (its rank in the range)
    give its line number once the report knows how many lines each earlier range had."""
    chunk: int
    index: int
    offset: int  # of its first byte, in the decompressed text
    raw: bytes


def match_files(pattern: str) -> list[FileMetadata]:
    """The files matching `pattern` (not directories), sorted by path, with size and update
    time from the file system's listing."""
    [result] = FileSystems.match([pattern])
    return sorted((m for m in result.metadata_list
                   if not (m.path.endswith("/") or ("://" not in m.path
                                                    and os.path.isdir(m.path)))),
                  key=lambda m: m.path)


def check_files(files: list[FileMetadata], pattern: str) -> None:
    """Refuses an input Beam could not read as text (parser.InputDataError), before it runs."""
    def head(path: str) -> bytes:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return f.read(8)

    parser.check_input([(m.path, m.size_in_bytes) for m in files], head, pattern)


class _LineSource(filebasedsource.FileBasedSource):
    """Lines of one file; a range owns the lines that start inside it."""

    def __init__(self, path: str, max_line_bytes: int) -> None:
        super().__init__(path, validate=False)
        self._max_line_bytes = max_line_bytes

    def _lines(self, file_name: str, range_tracker) -> Iterator[tuple[int, bytes]]:
        """(offset, raw) of each line the range owns, in order."""
        chunk = range_tracker.start_position()
        with self.open_file(file_name) as f:
            offset = chunk
            if chunk:  # the line running into this range belongs to the previous one
                f.seek(chunk - 1)
                # Only as far as the range goes: a long line may cover many ranges, and each
                # would otherwise read it to its end.
                skipped = parser.skip_line(f, range_tracker.stop_position() - chunk + 1)
                if skipped is None:  # no line starts in this range
                    return
                offset = chunk - 1 + skipped
                f.seek(offset)
            try_claim = range_tracker.try_claim
            for length, raw in parser.read_lines(f, self._max_line_bytes):
                if not try_claim(offset):
                    return
                yield offset, raw
                offset += length

    def read_records(self, file_name: str, range_tracker) -> Iterator[Line]:
        chunk = range_tracker.start_position()
        for index, (offset, raw) in enumerate(self._lines(file_name, range_tracker)):
            yield Line(chunk, index, offset, raw)


class RangeReport(NamedTuple):
    """What a range's reader says besides its pairs: the parse report of its lines."""
    path: str
    report: parser.ParseReport


class _PairSource(_LineSource):
    """The kept pairs of one file, parsed as they are read, each as ((English, French),
    (file number, byte offset)): the key and value that `references` combine. After the
    last one, a RangeReport of the range's lines (the rejected ones are only counted there).

    One element per kept line, of plain tuples that Beam encodes without pickling: the
    parsing, the report and the keying cost no extra step per line.
    """

    def __init__(self, path: str, max_line_bytes: int, file_number: int) -> None:
        super().__init__(path, max_line_bytes)
        self._file_number = file_number

    def read_records(self, file_name: str, range_tracker) -> Iterator[tuple | RangeReport]:
        chunk = range_tracker.start_position()
        report = parser.ParseReport()
        parse, max_line_bytes, number = parser.parse_fields, self._max_line_bytes, \
            self._file_number
        index = kept = 0
        for index, (offset, raw) in enumerate(self._lines(file_name, range_tracker), 1):
            fields = parse(raw, max_line_bytes, not offset)
            if fields.__class__ is tuple:
                kept += 1
                yield fields, (number, offset)
            else:
                report.reject(fields, chunk, index - 1, offset)
        yield RangeReport(file_name, report.add_range(chunk, index, kept))


def _read_all(files: beam.pvalue.PCollection, range_bytes: int, source_from_file,
              with_filename: bool) -> beam.pvalue.PCollection:
    return files | filebasedsource.ReadAllFiles(
        splittable=True, compression_type=CompressionTypes.AUTO,
        desired_bundle_size=range_bytes, min_bundle_size=0,
        source_from_file=source_from_file, with_filename=with_filename)


@beam.ptransform_fn
def ReadLines(files: beam.pvalue.PCollection, max_line_bytes: int,
              range_bytes: int = DEFAULT_RANGE_BYTES) -> beam.pvalue.PCollection:
    """FileMetadata -> (path, Line): ranges of `range_bytes` spread over the workers."""
    return _read_all(files, range_bytes, lambda path: _LineSource(path, max_line_bytes),
                     with_filename=True)


REPORTS = "reports"  # ReadPairs' output of RangeReports


class _SplitOffReports(beam.DoFn):
    def process(self, record):
        if record.__class__ is tuple:
            yield record
        else:
            yield beam.pvalue.TaggedOutput(REPORTS, record)


@beam.ptransform_fn
def ReadPairs(pipeline: beam.Pipeline, files: list[FileMetadata], max_line_bytes: int,
              range_bytes: int = DEFAULT_RANGE_BYTES) -> beam.pvalue.DoOutputsTuple:
    """The kept pairs of `files`, as ((English, French), (file number, byte offset)) where
    the file number is the file's rank in `files` (so positions sort as the files are given,
    then by offset: a sentence's references keep that order), and under REPORTS a
    RangeReport per range read."""
    numbers = {m.path: number for number, m in enumerate(files)}
    records = _read_all(
        pipeline | "InputFiles" >> beam.Create(files), range_bytes,
        lambda path: _PairSource(path, max_line_bytes, numbers[path]), with_filename=False)
    return records | "SplitOffReports" >> beam.ParDo(_SplitOffReports()).with_outputs(
        REPORTS, main="pairs")
