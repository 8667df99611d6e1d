"""ServedModel: a version from the serving directory as a Model artifact, the Trainer's
`base_model` for a warm start (`nmt run --warm-start`).

Only blessed models reach the serving directory (AtomicPusher), so its newest version is the
model a schedule should build on. The version is copied into the artifact (`Format-Serving/`,
where the Trainer looks for a base model; a served version is tens of MB), so the base stays
readable after the serving directory drops it, and ML Metadata records which version it was
(`served_version`, `served_path`), linking the new model to the run that pushed the old one.
`nmt run` fixes `version` when it builds the pipeline: an unchanged serving directory gives
the same execution (a cache hit), a newly pushed version a new one. A compiled Kubeflow spec
cannot know it: there `version` is 0, the newest when the task runs (its cache is off, see
runners/kubeflow_runner.py), and with nothing served yet the artifact stays empty and the
Trainer trains from scratch.
"""
from __future__ import annotations

import logging
import os
from typing import Any

from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter
from tfx.utils import io_utils, path_utils

from components.serving_versions import SERVED_PATH, SERVED_VERSION, pushed_versions

_LOG = logging.getLogger(__name__)

MODEL_KEY = "model"


class ServedModelSpec(types.ComponentSpec):
    PARAMETERS = {"serving_dir": ExecutionParameter(type=str),
                  "version": ExecutionParameter(type=int)}
    INPUTS: dict[str, ChannelParameter] = {}
    OUTPUTS = {MODEL_KEY: ChannelParameter(type=standard_artifacts.Model)}


class Executor(base_executor.BaseExecutor):
    """Copies `<serving_dir>/<version>` into the output Model. Public: compiled specs name it."""

    def Do(self, input_dict: dict[str, list[types.Artifact]],
           output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        model = artifact_utils.get_single_instance(output_dict[MODEL_KEY])
        serving_dir, version = exec_properties["serving_dir"], exec_properties["version"]
        if not version:
            versions = pushed_versions(serving_dir)
            if not versions:  # the properties, empty, still mark the artifact as no training
                model.set_string_custom_property(SERVED_VERSION, "")
                model.set_string_custom_property(SERVED_PATH, "")
                _LOG.info("Nothing is served under %s yet: the Trainer starts from scratch.",
                          serving_dir)
                return
            version = versions[-1]
        served = os.path.join(serving_dir, str(version))
        io_utils.copy_dir(served, path_utils.serving_model_dir(model.uri))
        model.set_string_custom_property(SERVED_VERSION, str(version))
        model.set_string_custom_property(SERVED_PATH, served)
        _LOG.info("Took served version %s as the base model.", version)


class ServedModel(base_component.BaseComponent):
    """The served `version` under `serving_dir` (0: the newest when it runs) as a Model
    artifact."""

    SPEC_CLASS = ServedModelSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, serving_dir: str, version: int) -> None:
        super().__init__(spec=ServedModelSpec(
            serving_dir=serving_dir, version=version,
            model=types.Channel(type=standard_artifacts.Model)))
