"""Pusher that publishes each blessed model atomically under an increasing integer version.

TFX's Pusher copies straight into `<base>/<unix time>/`, so a model server scanning the base
directory can see a half-copied version. This one copies into a hidden temporary directory
(TF Serving ignores non-numeric names) and renames it into place, so a version directory
either does not exist or is complete: `<base>/<version>/saved_model.pb` + `variables/`.
"""
from __future__ import annotations

import logging
import os
import time

from tfx.components import Pusher
from tfx.components.pusher import executor as tfx_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

_LOG = logging.getLogger(__name__)


def pushed_versions(base_directory: str) -> list[int]:
    """Integer version directories under `base_directory`, ascending."""
    if not fileio.exists(base_directory):
        return []
    return sorted(int(name.rstrip("/")) for name in fileio.listdir(base_directory)
                  if name.rstrip("/").isdigit())


def next_version(base_directory: str) -> int:
    """The Unix time, or one more than the newest version if that is not newer."""
    return max([int(time.time())] + [v + 1 for v in pushed_versions(base_directory)])


def publish(model_path: str, base_directory: str) -> tuple[int, str]:
    """Copies `model_path` to `<base>/<version>` atomically; returns (version, path)."""
    fileio.makedirs(base_directory)
    version = next_version(base_directory)
    staging = os.path.join(base_directory, f".staging-{version}-{os.getpid()}")
    io_utils.copy_dir(model_path, staging)
    final = os.path.join(base_directory, str(version))
    fileio.rename(staging, final)
    return version, final


class _Executor(tfx_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        if not self.CheckBlessing(input_dict):
            self._MarkNotPushed(model_push)
            _LOG.info("The model was not blessed by the Evaluator: nothing pushed.")
            return
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(
            exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        model_path = self.GetModelPath(input_dict)
        version, path = publish(model_path, destination.filesystem.base_directory)
        io_utils.copy_dir(model_path, model_push.uri)
        self._MarkPushed(model_push, pushed_destination=path, pushed_version=str(version))
        _LOG.info("Pushed the blessed model as version %d: %s", version, path)


class AtomicPusher(Pusher):
    """Pusher with atomic, increasing integer versions (see module docstring)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(_Executor)
