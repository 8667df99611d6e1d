"""Pusher that publishes each blessed model atomically under an increasing integer version.

TFX's Pusher copies straight into `<base>/<unix time>/`, so a model server scanning the base
directory can see a half-copied version, and two pushers in the same second pick the same
directory. This one never shows a reader half a model:

- On a local or mounted filesystem it copies into a hidden staging directory (TF Serving
  ignores non-numeric names) and renames it to `<base>/<version>`. rename(2) refuses a
  non-empty target, so a pusher that loses a race for a version number takes the next one.
- On object stores (gs://, s3://, any `scheme://`) a rename is a copy then a delete, not atomic.
  There the files go straight to `<base>/<version>/`, `saved_model.pb` last; a version counts
  as pushed only once its `saved_model.pb` exists, so a reader that lists versions with
  `serving_versions.pushed_versions` never sees one without every file.

A failed push (e.g. a full disk) removes what it wrote.
"""
from __future__ import annotations

import errno
import logging
import os
import uuid

from tfx.components import Pusher
from tfx.components.pusher import executor as tfx_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

from components.serving_versions import SAVED_MODEL, is_object_store, next_version

_LOG = logging.getLogger(__name__)


def publish(model_path: str, base_directory: str) -> tuple[int, str]:
    """Copies `model_path` to `<base>/<version>` so that no reader sees it half-written;
    returns (version, path)."""
    fileio.makedirs(base_directory)
    if is_object_store(base_directory):
        return _publish_saved_model_last(model_path, base_directory)
    return _publish_by_rename(model_path, base_directory)


def _publish_by_rename(model_path: str, base_directory: str) -> tuple[int, str]:
    staging = os.path.join(base_directory, f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        io_utils.copy_dir(model_path, staging)
        while True:
            version = next_version(base_directory)
            final = os.path.join(base_directory, str(version))
            try:
                os.rename(staging, final)  # fails if a concurrent pusher took this version
                return version, final
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                _LOG.info("Version %d was pushed by someone else meanwhile: taking the next.",
                          version)
    finally:
        if fileio.exists(staging):
            fileio.rmtree(staging)


def _publish_saved_model_last(model_path: str, base_directory: str) -> tuple[int, str]:
    version = next_version(base_directory)
    final = os.path.join(base_directory, str(version))
    files = sorted((os.path.relpath(os.path.join(directory, name), model_path)
                    for directory, _, names in fileio.walk(model_path) for name in names),
                   key=lambda relative: (relative == SAVED_MODEL, relative))
    try:
        for relative in files:
            target = os.path.join(final, relative)
            fileio.makedirs(os.path.dirname(target))
            fileio.copy(os.path.join(model_path, relative), target, overwrite=False)
    except BaseException:
        if fileio.exists(final):
            fileio.rmtree(final)
        raise
    return version, final


class Executor(tfx_executor.Executor):
    """Pusher's executor with atomic versions. Public: compiled KFP/Vertex specs name it
    (--executor_class_path), and docker/check_image.py imports it."""

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
        io_utils.copy_dir(model_path, model_push.uri)  # first: TFX removes it if Do fails
        version, path = publish(model_path, destination.filesystem.base_directory)
        self._MarkPushed(model_push, pushed_destination=path, pushed_version=str(version))
        _LOG.info("Pushed the blessed model as version %d: %s", version, path)


class AtomicPusher(Pusher):
    """Pusher with atomic, increasing integer versions (see module docstring)."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)
