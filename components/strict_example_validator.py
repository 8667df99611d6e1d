"""ExampleValidator that stops the pipeline when it finds anomalies.

TFX's ExampleValidator only records anomalies; downstream components would still train on
broken data. This one fails its execution with a message naming each split, feature and
problem, so nothing after it (Transform, Trainer, Pusher) runs on bad data.
"""
from __future__ import annotations

import os

from tensorflow_metadata.proto.v0 import anomalies_pb2, statistics_pb2
from tfx.components import ExampleValidator
from tfx.components.example_validator import executor as tfx_executor
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils


class DataValidationError(RuntimeError):
    """The examples do not match the curated schema."""


def describe_anomalies(split: str, anomalies: anomalies_pb2.Anomalies) -> list[str]:
    """One line per broken feature: which split, which feature, and how it broke."""
    found = sorted(anomalies.anomaly_info.items())
    if anomalies.HasField("dataset_anomaly_info"):
        found.append(("(whole split)", anomalies.dataset_anomaly_info))
    return [f"split '{split}', feature '{feature}': {info.short_description} "
            f"({info.description.rstrip('.')})" for feature, info in found]


def empty_split_problem(split: str, statistics: statistics_pb2.DatasetFeatureStatisticsList
                        ) -> list[str]:
    """TFDV does not apply the schema's min_examples_count to a split with no examples at
    all (e.g. the eval split of a one-sentence fra.txt): say so ourselves."""
    if sum(dataset.num_examples for dataset in statistics.datasets):
        return []
    return [f"split '{split}' is empty (the schema requires at least one example; the input "
            "has too few distinct English sentences for this split)"]


class Executor(tfx_executor.Executor):
    """ExampleValidator's executor, failing on any anomaly. Public: compiled KFP/Vertex specs
    name it (--executor_class_path), and docker/check_image.py imports it."""

    def Do(self, input_dict, output_dict, exec_properties):
        result = super().Do(input_dict, output_dict, exec_properties)
        artifact = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.ANOMALIES_KEY])
        statistics = artifact_utils.get_single_instance(
            input_dict[standard_component_specs.STATISTICS_KEY])
        problems = []
        for split in artifact_utils.decode_split_names(artifact.split_names):
            problems += empty_split_problem(
                split, stats_artifact_utils.load_statistics(statistics, split).proto())
            path = os.path.join(artifact_utils.get_split_uri([artifact], split),
                                tfx_executor.DEFAULT_FILE_NAME)
            anomalies = anomalies_pb2.Anomalies.FromString(io_utils.read_bytes_file(path))
            problems += describe_anomalies(split, anomalies)
        if problems:
            raise DataValidationError(
                "Data validation failed, the pipeline stops before Transform: "
                + "; ".join(problems) + f". Anomalies are in {artifact.uri}.")
        return result


class StrictExampleValidator(ExampleValidator):
    """ExampleValidator whose execution fails on any anomaly (see module docstring)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
