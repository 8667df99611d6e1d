"""The serving directory's layout: `<base>/<version>/`, integer versions, complete once their
`saved_model.pb` exists (see atomic_pusher). Light enough for `nmt translate`, which reads it
without importing TFX's components (and with them Beam, ~5 s)."""
from __future__ import annotations

import os
import time

SAVED_MODEL = "saved_model.pb"  # written last on object stores: a version's "complete" mark
# A served version taken as a warm start's base (components/served_model.py) records these on
# its Model artifact; `nmt metadata lineage` follows them back to the run that pushed it.
SERVED_VERSION = "served_version"
SERVED_PATH = "served_path"


def is_object_store(path: str) -> bool:
    """gs://, s3:// and other `scheme://` paths, where a rename is not atomic."""
    return "://" in path


def version_names(base_directory: str) -> list[int]:
    """Every integer-named entry, complete or still being written."""
    from tfx.dsl.io import fileio  # TensorFlow's file systems: not for `nmt metadata`

    if not fileio.exists(base_directory):
        return []
    return sorted(int(name.rstrip("/")) for name in fileio.listdir(base_directory)
                  if name.rstrip("/").isdigit())


def pushed_versions(base_directory: str) -> list[int]:
    """Complete versions under `base_directory` (those with a saved_model.pb), ascending.

    Lists through TFX's filesystem layer: tf.io.gfile for gs://, s3://, hdfs:// and local paths.
    """
    from tfx.dsl.io import fileio

    return [v for v in version_names(base_directory)
            if fileio.exists(os.path.join(base_directory, str(v), SAVED_MODEL))]


def next_version(base_directory: str) -> int:
    """The Unix time, or one more than the newest version (complete or not) if that is newer."""
    return max([int(time.time())] + [v + 1 for v in version_names(base_directory)])
