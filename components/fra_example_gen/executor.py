"""Beam executor: fra.txt lines -> one tf.Example per distinct English sentence.

Built on TFX's file-based ExampleGen: it supplies the input PTransform; TFX does the
hash split on the `english` feature (so no sentence is in two splits) and writes TFRecords.
Every rejected line is counted by reason into `parse_report.json` beside the splits and
into the Examples artifact's custom properties.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any, Iterator

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.types import artifact_utils, standard_component_specs

from components.fra_example_gen import parser

_LOG = logging.getLogger(__name__)

REPORT_FILE = "parse_report.json"
MAX_LINE_BYTES_KEY = "max_line_bytes"
_REPORT_PATH_KEY = "_parse_report_path"  # set by Executor.Do for the PTransform


def _custom_config(exec_properties: dict[str, Any]) -> dict[str, Any]:
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    return json.loads(raw) if raw else {}


def read_and_parse(path: str, max_line_bytes: int) -> Iterator[parser.ParsedLine]:
    """Streams one file's lines (binary, so bad bytes reach the parser) as ParsedLines."""
    with tf.io.gfile.GFile(path, "rb") as f:
        yield from parser.parse_lines(parser.read_lines(f, max_line_bytes), max_line_bytes)


def check_input_file(path: str) -> None:
    """Refuses an empty or compressed file (parser.InputDataError) before Beam starts."""
    with tf.io.gfile.GFile(path, "rb") as f:
        parser.check_file_start(path, f.read(8))


def file_fingerprint(path: str) -> dict[str, Any]:
    """Path, size and sha256 of the input, for lineage ('which fra.txt made this model?')."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"path": path, "size_bytes": tf.io.gfile.stat(path).length,
            "sha256": digest.hexdigest()}


def to_example(english: str, references: list[tuple[int, str]]) -> tf.train.Example:
    """All French references of one English sentence, in file order."""
    french = [text.encode("utf-8") for _, text in sorted(references)]
    return tf.train.Example(features=tf.train.Features(feature={
        "english": tf.train.Feature(bytes_list=tf.train.BytesList(value=[english.encode("utf-8")])),
        "french": tf.train.Feature(bytes_list=tf.train.BytesList(value=french)),
    }))


def read_split(examples_uri: str, split: str) -> list[tuple[str, list[str]]]:
    """(English, all French references) of every example of one split, in file order: the
    inverse of `to_example`, for the tests, the benchmarks and the run report."""
    files = sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    rows = []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        rows.append((feature["english"].bytes_list.value[0].decode("utf-8"),
                     [v.decode("utf-8") for v in feature["french"].bytes_list.value]))
    return rows


class _ReportCombineFn(beam.CombineFn):
    def create_accumulator(self) -> parser.ParseReport:
        return parser.ParseReport()

    def add_input(self, report: parser.ParseReport, line: parser.ParsedLine) -> parser.ParseReport:
        return report.add(line)

    def merge_accumulators(self, reports) -> parser.ParseReport:
        merged = parser.ParseReport()
        for report in reports:
            merged.merge(report)
        return merged

    def extract_output(self, report: parser.ParseReport) -> parser.ParseReport:
        return report


def _write_report(report: parser.ParseReport, num_examples: int, path: str) -> None:
    payload = {**report.to_dict(), "examples": num_examples}
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _FraTxtToExample(pipeline: beam.Pipeline, exec_properties: dict[str, Any],
                     split_pattern: str) -> beam.pvalue.PCollection:
    input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    max_line_bytes = int(_custom_config(exec_properties).get(
        MAX_LINE_BYTES_KEY, parser.DEFAULT_MAX_LINE_BYTES))
    files = sorted(tf.io.gfile.glob(os.path.join(input_base, split_pattern)))
    if not files:
        raise FileNotFoundError(f"No input file matches {split_pattern!r} in {input_base!r}.")
    if len(files) > 1:
        raise ValueError(f"Expected one fra.txt, found {len(files)} files matching "
                         f"{split_pattern!r} in {input_base!r}: {files}")
    check_input_file(files[0])
    lines = (pipeline
             | "InputFile" >> beam.Create(files)
             | "ReadAndParse" >> beam.FlatMap(read_and_parse, max_line_bytes)
             | "Distribute" >> beam.Reshuffle())
    examples = (lines
                | "KeepPairs" >> beam.Filter(lambda line: line.kept)
                | "KeyByEnglish" >> beam.Map(lambda line: (line.english,
                                                           (line.line_number, line.french)))
                | "GroupByEnglish" >> beam.GroupByKey()
                | "ToExample" >> beam.MapTuple(lambda english, refs: to_example(english, list(refs))))
    report_path = exec_properties.get(_REPORT_PATH_KEY)
    if report_path:
        num_examples = beam.pvalue.AsSingleton(examples | "CountExamples" >> beam.combiners.Count.Globally())
        _ = (lines
             | "Report" >> beam.CombineGlobally(_ReportCombineFn())
             | "WriteReport" >> beam.Map(_write_report, num_examples, report_path))
    return examples


class Executor(BaseExampleGenExecutor):
    """fra.txt ExampleGen executor; logs and records the parse report after the run."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _FraTxtToExample

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        examples = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EXAMPLES_KEY])
        report_path = os.path.join(examples.uri, REPORT_FILE)
        super().Do(input_dict, output_dict, {**exec_properties, _REPORT_PATH_KEY: report_path})

        with tf.io.gfile.GFile(report_path) as f:
            report = json.load(f)
        files = tf.io.gfile.glob(os.path.join(
            exec_properties[standard_component_specs.INPUT_BASE_KEY],
            json.loads(exec_properties[standard_component_specs.INPUT_CONFIG_KEY])
            ["splits"][0]["pattern"]))
        report["input"] = file_fingerprint(files[0])
        with tf.io.gfile.GFile(report_path, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
        for key in ("lines_read", "pairs_kept", "lines_rejected", "examples"):
            examples.set_int_custom_property(key, report[key])
        for key, value in report["input"].items():
            examples.set_string_custom_property(f"input_{key}", str(value))
        examples.set_string_custom_property("parse_report", json.dumps(report, sort_keys=True))
        _LOG.info("fra.txt ExampleGen: %s", summarize(report))
        if not report["pairs_kept"]:  # TFX removes the empty splits when Do fails
            raise parser.InputDataError(
                f"No usable English<TAB>French line in {report['input']['path']}: "
                f"{summarize(report)}")


def summarize(report: dict[str, Any]) -> str:
    """The parse report as one sentence, e.g. for logs and the CLI."""
    text = (f"read {report['lines_read']} lines of {report['input']['path']}, "
            f"kept {report['pairs_kept']} sentence pairs as {report['examples']} examples "
            f"(one per English sentence), rejected {report['lines_rejected']}")
    rejected = report["rejected_by_reason"]
    if not rejected:
        return text + "."
    details = "; ".join(
        f"{reason}: {info['count']} (e.g. line {', '.join(map(str, info['sample_line_numbers']))})"
        for reason, info in rejected.items())
    return f"{text} [{details}]."
