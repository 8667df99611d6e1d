"""The TensorFlow runtime settings `nmt` starts with: environment variables TensorFlow reads
once, when it starts, so they are set before it loads (`apply_defaults`). A value already in
the environment wins. The image sets the same ones for the compiled pipeline (Dockerfile), and
the benchmarks and tests run with them, so that they time and test what `nmt` runs.

Importing this module does not import TensorFlow.
"""
from __future__ import annotations

import os

DEFAULTS = {
    # TensorFlow turns its oneDNN CPU kernels on by itself only on CPUs with AVX512-VNNI,
    # bfloat16 or AMX units (where mixed_bfloat16 needs them). On AVX2-only CPUs they trained
    # at 0.63 of the Eigen kernels' step time (2026-11-24), and nothing measured since beats
    # them (BENCHMARKS.md, "Training time per step"). 0 keeps Eigen.
    "TF_ENABLE_ONEDNN_OPTS": "1",
    # tf.keras is Keras 2 (tf_keras), which this project, TFT 1.16 and TFMA use. TFT sets it
    # itself, but only once TensorFlow has loaded, and TensorFlow has then imported Keras 3
    # (and matplotlib) for nothing, at every `nmt` command's start (docs/benchmarks-history.md,
    # "`nmt evaluate`'s overlap check").
    "TF_USE_LEGACY_KERAS": "1",
}


def apply_defaults() -> None:
    """Sets every DEFAULTS variable the environment does not set already."""
    for name, value in DEFAULTS.items():
        os.environ.setdefault(name, value)
