"""Beam executor: fra.txt-style lines -> one tf.Example per distinct English sentence.

Built on TFX's file-based ExampleGen: it supplies the input PTransform; TFX does the
hash split on the `english` feature (so no sentence is in two splits) and writes TFRecords.
The input is one file or many (plain or .gz), read in parallel ranges (source.ReadLines).
Every rejected line is counted by reason and file into `parse_report.json` beside the splits
and into the Examples artifact's custom properties, with the pairs dropped as duplicates or
over the per-sentence cap.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen import utils
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.types import artifact_utils, standard_component_specs

from components.fra_example_gen import fingerprint, parser, records, references, source, spans

_LOG = logging.getLogger(__name__)

REPORT_FILE = "parse_report.json"
MAX_LINE_BYTES_KEY = "max_line_bytes"
MAX_REFERENCES_KEY = "max_references"
RANGE_BYTES_KEY = "range_bytes"
_REPORT_PATH_KEY = "_parse_report_path"  # set by Executor.Do for the PTransform
_FILES_KEY = "_input_files"  # set by Executor.Do: the matched files, for the PTransform
# Set by the driver (component.ContentFingerprintDriver) for a {SPAN} pattern: the spans to
# read ("3,4", also the Examples' custom property) and that pattern, relative to input_base.
SPANS_KEY = spans.SPANS_PROPERTY
SPAN_PATTERN_KEY = "span_pattern"


def _custom_config(exec_properties: dict[str, Any]) -> dict[str, Any]:
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    return json.loads(raw) if raw else {}


def split_pattern(exec_properties: dict[str, Any]) -> str:
    """The file pattern of the one input split, relative to input_base."""
    return json.loads(exec_properties[standard_component_specs.INPUT_CONFIG_KEY])[
        "splits"][0]["pattern"]


def _input_patterns(exec_properties: dict[str, Any]) -> tuple[str, list[str]]:
    """The input's name and its files' patterns: the {SPAN} pattern and each span's to read,
    else TFX's pattern (on Kubeflow, TFX's driver put the newest span in it)."""
    base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
    span_pattern = exec_properties.get(SPAN_PATTERN_KEY)
    if not span_pattern:
        pattern = os.path.join(base, split_pattern(exec_properties))
        return pattern, [pattern]
    return os.path.join(base, span_pattern), [
        os.path.join(base, spans.fill(span_pattern, span))
        for span in spans.parse_spans(exec_properties[SPANS_KEY])]


def remove_beam_temp(examples_uri: str) -> list[str]:
    """Removes the `beam-temp-*` directories inside the splits and returns them.

    Beam writes each split through a temporary directory beside its files and removes it when
    the write commits. A job that a runner restarted (Flink after a lost TaskManager) leaves
    the killed attempt's directory behind, and the next components read `Split-*/*`.
    """
    leftovers = sorted(path for path in tf.io.gfile.glob(
        os.path.join(examples_uri, "Split-*", "beam-temp-*")) if tf.io.gfile.isdir(path))
    for path in leftovers:
        tf.io.gfile.rmtree(path)
    return leftovers


def to_example(english: str, refs: list[tuple[Any, str]]) -> tf.train.Example:
    """All kept French references of one English sentence, in (position) order."""
    example = tf.train.Example()
    features = example.features.feature
    features[records.ENGLISH_FEATURE].bytes_list.value.append(english.encode("utf-8"))
    french = features[records.FRENCH_FEATURE].bytes_list
    french.SetInParent()  # present even when empty, as before
    french.value.extend([text.encode("utf-8") for _, text in sorted(refs)])
    return example


class _ReportCombineFn(beam.CombineFn):
    """source.RangeReport -> {path: ParseReport}."""

    def create_accumulator(self) -> dict[str, parser.ParseReport]:
        return {}

    def add_input(self, reports: dict[str, parser.ParseReport], ranged: source.RangeReport
                  ) -> dict[str, parser.ParseReport]:
        reports.setdefault(ranged.path, parser.ParseReport()).merge(ranged.report)
        return reports

    def merge_accumulators(self, accumulators) -> dict[str, parser.ParseReport]:
        merged: dict[str, parser.ParseReport] = {}
        for reports in accumulators:
            for path, report in reports.items():
                merged.setdefault(path, parser.ParseReport()).merge(report)
        return merged

    def extract_output(self, reports: dict[str, parser.ParseReport]
                       ) -> dict[str, parser.ParseReport]:
        return reports


def _write_report(reports: dict[str, parser.ParseReport], paths: list[str],
                  counts: tuple[int, int, int], max_references: int, path: str) -> None:
    num_examples, duplicates, over_cap = counts
    files = {p: (reports[p] if p in reports else parser.ParseReport()).to_dict() for p in paths}
    payload = {**parser.total_report(files), "examples": num_examples,
               "duplicate_pairs": duplicates, "references_over_cap": over_cap,
               "max_references": max_references}
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)


_COUNTS = "counts"


class _ToExample(beam.DoFn):
    """(English, Capped) -> tf.Example; the examples and the references left out by the cap
    are counted per bundle and output once, under _COUNTS, as (examples, 0, over cap)."""

    def start_bundle(self) -> None:
        self._examples = self._over_cap = 0

    def process(self, element):
        english, capped = element
        self._examples += 1
        self._over_cap += capped.dropped
        yield to_example(english, capped.references)

    def finish_bundle(self):
        if self._examples:
            yield beam.pvalue.TaggedOutput(_COUNTS, beam.transforms.window.GlobalWindows
                                           .windowed_value((self._examples, 0, self._over_cap)))


def _add_counts(counts) -> tuple[int, int, int]:
    """(examples, duplicate pairs, references over the cap), added up."""
    return tuple(map(sum, zip((0, 0, 0), *counts)))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _FraTxtToExample(pipeline: beam.Pipeline, exec_properties: dict[str, Any],
                     split_pattern: str) -> beam.pvalue.PCollection:
    config = _custom_config(exec_properties)
    max_line_bytes = int(config.get(MAX_LINE_BYTES_KEY, parser.DEFAULT_MAX_LINE_BYTES))
    max_references = int(config.get(MAX_REFERENCES_KEY, parser.DEFAULT_MAX_REFERENCES))
    range_bytes = int(config.get(RANGE_BYTES_KEY, source.DEFAULT_RANGE_BYTES))
    files = exec_properties.get(_FILES_KEY) or source.match_files(os.path.join(
        exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern))
    source.check_files(files, split_pattern)
    # A sentence's references keep the files' order: by path, and older spans' first.
    span_pattern = exec_properties.get(SPAN_PATTERN_KEY)
    if span_pattern:
        by_path = {m.path: m for m in files}
        files = [by_path[path] for path in spans.in_span_order(os.path.join(
            exec_properties[standard_component_specs.INPUT_BASE_KEY], span_pattern),
            list(by_path))]
    # Parsed and keyed as they are read; the parse report comes once per range.
    read = pipeline | "ReadPairs" >> source.ReadPairs(files, max_line_bytes, range_bytes)
    grouped, duplicates = (read.pairs
                           | "GroupReferences" >> references.GroupReferences(max_references))
    converted = grouped | "ToExample" >> beam.ParDo(_ToExample()).with_outputs(
        _COUNTS, main="examples")
    report_path = exec_properties.get(_REPORT_PATH_KEY)
    if report_path:
        counts = ((converted[_COUNTS],
                   duplicates | "AsCounts" >> beam.Map(lambda number: (0, number, 0)))
                  | "AllCounts" >> beam.Flatten()
                  | "AddCounts" >> beam.CombineGlobally(_add_counts))
        _ = (read[source.REPORTS]
             | "Report" >> beam.CombineGlobally(_ReportCombineFn())
             | "WriteReport" >> beam.Map(
                 _write_report, sorted(m.path for m in files), beam.pvalue.AsSingleton(counts),
                 max_references, report_path))
    return converted.examples


class Executor(BaseExampleGenExecutor):
    """fra.txt ExampleGen executor; logs and records the parse report after the run."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
        return _FraTxtToExample

    def Do(self, input_dict, output_dict, exec_properties) -> None:
        examples = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.EXAMPLES_KEY])
        report_path = os.path.join(examples.uri, REPORT_FILE)
        pattern, patterns = _input_patterns(exec_properties)
        # once, for the PTransform and the fingerprint
        files = sorted((m for p in patterns for m in source.match_files(p)), key=lambda m: m.path)
        super().Do(input_dict, output_dict, {**exec_properties, _REPORT_PATH_KEY: report_path,
                                             _FILES_KEY: files})

        for leftover in remove_beam_temp(examples.uri):
            _LOG.info("Removed %s: a restarted Beam job's unfinished write.", leftover)
        with tf.io.gfile.GFile(report_path) as f:
            report = json.load(f)
        # The driver hashed every file for the cache key this very run: reuse its digests.
        digests = fingerprint.reuse_or_compute(
            [(m.path, m.size_in_bytes) for m in files],
            fingerprint.parse_manifest(exec_properties.get(utils.FINGERPRINT_PROPERTY_NAME) or ""))
        for path, digest in digests.items():
            report["files"][path]["digest"] = digest
        report["input"] = fingerprint.input_summary(
            pattern, {m.path: m.size_in_bytes for m in files}, digests)
        if SPANS_KEY in exec_properties:
            report[SPANS_KEY] = exec_properties[SPANS_KEY]
            examples.set_string_custom_property(SPANS_KEY, report[SPANS_KEY])
        with tf.io.gfile.GFile(report_path, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
        for key in ("lines_read", "pairs_kept", "lines_rejected", "examples", "duplicate_pairs",
                    "references_over_cap"):
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
    several = len(report["files"]) > 1
    read = report.get(SPANS_KEY)
    notes = ([f"span{'s' * (',' in read)} {read}"] if read else []) + (
        [f"{len(report['files'])} files"] if several else [])
    about = f" ({'; '.join(notes)})" if notes else ""
    text = (f"read {report['lines_read']} lines of {report['input']['path']}{about}, "
            f"kept {report['pairs_kept']} sentence pairs as {report['examples']} examples "
            f"(one per English sentence)")
    if report["duplicate_pairs"] or report["references_over_cap"]:
        text += (f" after dropping {report['duplicate_pairs']} duplicate pairs and "
                 f"{report['references_over_cap']} references over the cap of "
                 f"{report['max_references']} per sentence")
    text += f", rejected {report['lines_rejected']}"
    rejected = report["rejected_by_reason"]
    if not rejected:
        return text + "."

    def where(sample: dict[str, Any]) -> str:
        return f"{sample['file']} line {sample['line']}" if several else f"line {sample['line']}"

    details = "; ".join(
        f"{reason}: {info['count']} (e.g. {', '.join(where(s) for s in info['samples'])})"
        for reason, info in rejected.items())
    return f"{text} [{details}]."
