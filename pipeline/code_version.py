"""A fingerprint of the model code, so that changing it invalidates TFX's cache.

Transform and Trainer reference their functions by module path (so the installed package runs
the same everywhere). TFX fingerprints a `module_file`, but not a module path: without this, an
edited preprocessing_fn or model would silently reuse cached results from the old code.
"""
from __future__ import annotations

import hashlib
import os

import trainer_module


def code_version() -> str:
    """sha256 (first 16 hex digits) over the trainer_module sources, in a stable order."""
    root = os.path.dirname(os.path.abspath(trainer_module.__file__))
    digest = hashlib.sha256()
    for directory, subdirs, files in sorted(os.walk(root)):
        subdirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(directory, name)
            digest.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:16]
