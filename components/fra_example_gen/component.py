"""The fra.txt ExampleGen component: TFX's FileBasedExampleGen with our Beam executor."""
from __future__ import annotations

import os
import re
from typing import Any, Sequence

from tfx.components.example_gen import driver, utils
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.fra_example_gen import executor, fingerprint, parser, source, spans
from components.fra_example_gen.splits import SPLIT_NAMES, split_hash_buckets

PARTITION_FEATURE = "english"
# The modification-time part of TFX's input fingerprint (tfx.utils.io_utils.generate_fingerprint).
_MTIME_CHECKSUMS = re.compile(r",xor_checksum:\d+,sum_checksum:\d+")


def split_output_config(percentages: Sequence[float]) -> example_gen_pb2.Output:
    """Hash-bucket splits over the English sentence, e.g. (80, 10, 10) -> buckets 8/1/1.

    Hashing the English text (not the pair) keeps every translation of a sentence in the
    same split, so no source sentence leaks from training into evaluation.
    """
    return example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
        splits=[example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=buckets)
                for name, buckets in zip(SPLIT_NAMES, split_hash_buckets(percentages))],
        partition_feature_name=PARTITION_FEATURE))


def rolling_range(num_spans: int) -> range_config_pb2.RangeConfig:
    """The newest `num_spans` spans."""
    return range_config_pb2.RangeConfig(
        rolling_range=range_config_pb2.RollingRange(num_spans=num_spans))


def _spans_to_read(range_config: str | None) -> int:
    """How many of the newest spans a RangeConfig (JSON, as exec properties hold it) reads."""
    if not range_config:
        return 1
    config = range_config_pb2.RangeConfig()
    proto_utils.json_to_proto(range_config, config)
    return config.rolling_range.num_spans or 1


class ContentFingerprintDriver(driver.FileBasedDriver):
    """TFX's driver, with the input files' modification times replaced by content digests
    (sha256, or an object store's own checksum: fingerprint.file_digest).

    TFX fingerprints input files by size and modification time (in seconds), and the
    fingerprint is part of ExampleGen's cache key. So an edited fra.txt of the same size whose
    mtime was kept (`cp -p`, `rsync -t`, a restored backup) would reuse stale examples, and an
    identical one with a new mtime (a copy, a checkout, a restored volume) would re-run
    ExampleGen and everything downstream, the Trainer included. Keyed by content, a changed
    file re-executes and an unchanged one is cached. The executor reuses these digests, so
    each file is hashed once per run.

    With `{SPAN}` in the file pattern, TFX resolves the newest span (exec property `span`);
    a RollingRange of N spans (which TFX's ExampleGen refuses) reads the newest N that exist,
    listed in the exec property `spans` ("3,4") with the `{SPAN}` pattern (`span_pattern`),
    and all of their files make the fingerprint.
    """

    def resolve_exec_properties(self, exec_properties: dict[str, Any], pipeline_info,
                                component_info) -> dict[str, Any]:
        span_pattern = executor.split_pattern(exec_properties)  # before TFX fills in the span
        range_config = exec_properties.get(standard_component_specs.RANGE_CONFIG_KEY)
        count = _spans_to_read(range_config)
        if count > 1:  # TFX resolves the newest span only: the older ones are added below
            exec_properties = {**exec_properties, standard_component_specs.RANGE_CONFIG_KEY:
                               proto_utils.proto_to_json(rolling_range(1))}
        exec_properties = super().resolve_exec_properties(exec_properties, pipeline_info,
                                                          component_info)
        if range_config:  # as given, in ML Metadata (None would change every cache key)
            exec_properties[standard_component_specs.RANGE_CONFIG_KEY] = range_config
        input_base = exec_properties[standard_component_specs.INPUT_BASE_KEY]
        patterns = [executor.split_pattern(exec_properties)]
        if spans.has_span(span_pattern):
            pattern = os.path.join(input_base, span_pattern)
            found = spans.find_spans(pattern, [m.path for m in source.match_files(
                spans.files_glob(pattern))])
            read = spans.newest(found, count, latest=exec_properties[utils.SPAN_PROPERTY_NAME])
            exec_properties[executor.SPANS_KEY] = spans.format_spans(read)
            exec_properties[executor.SPAN_PATTERN_KEY] = span_pattern
            patterns = [spans.fill(span_pattern, span) for span in read]
        digests = {m.path: fingerprint.file_digest(m.path, m.size_in_bytes)
                   for pattern in patterns
                   for m in source.match_files(os.path.join(input_base, pattern))}
        # "split:NAME,num_files:N,total_bytes:B,xor_checksum:MTIME,sum_checksum:MTIME" per split
        # (of the newest span only: the manifest lists every file read)
        sizes = _MTIME_CHECKSUMS.sub("", exec_properties[utils.FINGERPRINT_PROPERTY_NAME])
        exec_properties[utils.FINGERPRINT_PROPERTY_NAME] = "\n".join(
            [sizes, fingerprint.format_manifest(digests)])
        return exec_properties


class FraTxtExampleGen(FileBasedExampleGen):
    """Reads the files `<input_base>/<file_pattern>` matches, plain or .gz
    (English<TAB>French[<TAB>attribution] lines).

    Emits one tf.Example per distinct English sentence: `english` (bytes) and `french`
    (bytes list: its distinct references, at most `max_references`, in file order), split
    train/eval/test by English sentence. `range_bytes`: how much of a plain file one worker
    reads at a time.

    A `{SPAN}` in `file_pattern` (e.g. "fra-{SPAN}.txt") reads the newest span, or the newest
    `newest_spans` of them (LocalDagRunner only: TFX's own driver, which KFP runs, reads one).
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
    DRIVER_CLASS = ContentFingerprintDriver  # LocalDagRunner; KFP v2 runs a driver of its own

    def __init__(self, input_base, file_pattern: str = "fra.txt",
                 split_percentages: Sequence[float] = (80, 10, 10),
                 max_line_bytes: int = parser.DEFAULT_MAX_LINE_BYTES,
                 max_references: int = parser.DEFAULT_MAX_REFERENCES,
                 range_bytes: int = source.DEFAULT_RANGE_BYTES, newest_spans: int = 1):
        spans.check_pattern(file_pattern)
        if newest_spans > 1 and not spans.has_span(file_pattern):
            raise spans.SpanPatternError(file_pattern, f"has no {{SPAN}}: reading the newest "
                                                       f"{newest_spans} spans needs one")
        super().__init__(
            input_base=input_base,
            input_config=example_gen_pb2.Input(splits=[
                example_gen_pb2.Input.Split(name="single_split", pattern=file_pattern)]),
            output_config=split_output_config(split_percentages),
            custom_config={executor.MAX_LINE_BYTES_KEY: max_line_bytes,
                           executor.MAX_REFERENCES_KEY: max_references,
                           executor.RANGE_BYTES_KEY: range_bytes},
            range_config=rolling_range(newest_spans) if newest_spans > 1 else None)
