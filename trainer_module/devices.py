"""Which devices train the model, in which precision, and which worker writes the results.

Every GPU of a machine (MirroredStrategy), several machines when TF_CONFIG names them
(MultiWorkerMirroredStrategy, TensorFlow's own collective runtime), else the CPU.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
from typing import Any, Callable

import tensorflow as tf
from tensorflow.python.util import _pywrap_util_port  # TF's own "is oneDNN on", no public API

from trainer_module.hparams import HParams

_LOG = logging.getLogger(__name__)
_CPU_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")  # as /proc/cpuinfo names them


def num_workers() -> int:
    """Machines named by TF_CONFIG (chief + workers); 1 without TF_CONFIG."""
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return max(1, len(cluster.get("worker", [])) + len(cluster.get("chief", [])))


def choose_strategy() -> tf.distribute.Strategy:
    """MultiWorkerMirrored when TF_CONFIG names several workers, Mirrored over all GPUs, else
    CPU."""
    workers = num_workers()
    gpus = tf.config.list_physical_devices("GPU")
    if workers > 1:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        resolver = strategy.cluster_resolver
        _LOG.info("Training on %d workers (TF_CONFIG; this is %s %d) with %d GPU(s) each: "
                  "MultiWorkerMirroredStrategy, %d replicas.", workers, resolver.task_type,
                  resolver.task_id, len(gpus), strategy.num_replicas_in_sync)
    elif gpus:
        strategy = tf.distribute.MirroredStrategy()
        _LOG.info("Training on %d GPU(s): %s.", len(gpus), ", ".join(g.name for g in gpus))
    else:
        strategy = tf.distribute.get_strategy()
        _LOG.info("No GPU visible: training on the CPU (%d threads, oneDNN kernels %s).",
                  os.cpu_count() or 1, "on" if onednn_enabled() else
                  "off; with TF_ENABLE_ONEDNN_OPTS=1 set before TensorFlow loads, training "
                  "on an AVX2-only CPU is ~1.6x faster")
    return strategy


def onednn_enabled() -> bool:
    """Whether TensorFlow runs its oneDNN CPU kernels (fixed when TensorFlow loads, from
    TF_ENABLE_ONEDNN_OPTS or, unset, from the CPU's features)."""
    return bool(_pywrap_util_port.IsMklEnabled())


def writes_results(strategy: tf.distribute.Strategy) -> bool:
    """True on the one worker that keeps checkpoints and writes history and the export (the
    chief, TensorFlow's `should_checkpoint`); the others write to temporary places."""
    return strategy.extended.should_checkpoint


def worker_name(strategy: tf.distribute.Strategy) -> str:
    """'worker-1' under MultiWorkerMirroredStrategy, 'local' otherwise (for temporary paths)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return "local"
    return f"{resolver.task_type}-{resolver.task_id}"


def _cpuinfo(path: str) -> str:
    """The file's text, or "" where there is none (not Linux)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _has_bfloat16_flags(text: str) -> bool:
    return any(re.search(rf"\b{flag}\b", text) for flag in _CPU_BFLOAT16_FLAGS)


def cpu_has_bfloat16_units(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU multiplies bfloat16 natively (Intel AMX-BF16 or AVX512-BF16)."""
    return _has_bfloat16_flags(_cpuinfo(cpuinfo))


def machine_kind(cpuinfo: str = "/proc/cpuinfo", gpus: int | None = None) -> dict[str, Any]:
    """What resolve_precision's answer depends on: the GPUs (default: those visible), the
    CPU's model name, its cores (one model name is sold with 2 cores and with 32) and whether
    it has bfloat16 units."""
    text = _cpuinfo(cpuinfo)
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), "")
    if gpus is None:
        gpus = len(tf.config.list_physical_devices("GPU"))
    return {"gpus": gpus, "cpu": model, "cores": os.cpu_count() or 1,
            "bfloat16_units": _has_bfloat16_flags(text)}


# mixed_bfloat16 must be at least this much faster than float32 in the probe to be chosen.
MIN_BFLOAT16_SPEEDUP = 1.05


def resolve_precision(precision: str, gpus: int | None = None, cpu_bfloat16: bool | None = None,
                      bfloat16_speedup: Callable[[], float] | None = None) -> tuple[str, str]:
    """(Keras policy name, why): "auto" becomes mixed_float16 on GPUs; on a CPU with bfloat16
    units, mixed_bfloat16 where `bfloat16_speedup()` (a probe: float32 step time over
    mixed_bfloat16's) says it pays; else float32. Without bfloat16 units it is emulated and
    several times slower (BENCHMARKS.md, "Train-step time per precision"): no probe then.
    Other values stay as asked."""
    if gpus is None:
        gpus = len(tf.config.list_physical_devices("GPU"))
    if precision != "auto":
        reason = "as configured"
        if precision == "mixed_float16" and not gpus:
            reason += "; float16 is emulated on most CPUs, mixed_bfloat16 or float32 is faster"
        return precision, reason
    if gpus:
        return "mixed_float16", f"auto: {gpus} GPU(s)"
    if not (cpu_has_bfloat16_units() if cpu_bfloat16 is None else cpu_bfloat16):
        return "float32", "auto: no GPU, and no bfloat16 units on the CPU"
    units = " or ".join(_CPU_BFLOAT16_FLAGS)
    if bfloat16_speedup is None:
        return "mixed_bfloat16", f"auto: the CPU has bfloat16 units ({units})"
    speedup = bfloat16_speedup()
    if speedup >= MIN_BFLOAT16_SPEEDUP:
        return "mixed_bfloat16", (f"auto: the CPU has bfloat16 units ({units}) and a probe "
                                  f"trained this model {speedup:.2f}x faster with them")
    return "float32", (f"auto: the CPU has bfloat16 units ({units}), but a probe trained this "
                       f"model only {speedup:.2f}x as fast with them")


def resolve_decode_precision(precision: str, bfloat16_speedup: Callable[[], float],
                             cpu_bfloat16: bool | None = None) -> tuple[str, str]:
    """(float32 or bfloat16, why): the exported model's decoding weights. "auto" is bfloat16
    where this CPU has bfloat16 units and `bfloat16_speedup()` (a probe: float32 decoding
    time over bfloat16's, decode_probe.py; called only then) says they pay, as
    resolve_precision decides for training. The export is then meant to be served on such a
    CPU (without the units bfloat16 is emulated, about twice as slow: BENCHMARKS.md,
    "Decoding speed")."""
    if precision != "auto":
        return precision, "as configured"
    if not (cpu_has_bfloat16_units() if cpu_bfloat16 is None else cpu_bfloat16):
        return "float32", "auto: this CPU has no bfloat16 units"
    elsewhere = ("; to serve it on a CPU without them, export it with --hparam "
                 "decode_precision=float32")
    speedup = bfloat16_speedup()
    if speedup >= MIN_BFLOAT16_SPEEDUP:
        return "bfloat16", (f"auto: this CPU has bfloat16 units and a probe decoded with them "
                            f"{speedup:.2f}x as fast" + elsewhere)
    return "float32", (f"auto: this CPU has bfloat16 units, but a probe decoded with them "
                       f"only {speedup:.2f}x as fast")


def chief_value(strategy: tf.distribute.Strategy, value: float) -> float:
    """The chief's `value`, on every worker: an all-reduce to which only the chief adds its
    own (float32: exact for integers below 2**24). Without other workers, `value` itself."""
    if num_workers() <= 1:
        return value
    return float(_sum_over_replicas(strategy)(tf.constant(
        float(value) if writes_results(strategy) else 0.0)))


@functools.lru_cache(maxsize=None)
def _sum_over_replicas(strategy: tf.distribute.Strategy) -> Callable[[tf.Tensor], tf.Tensor]:
    """One traced all-reduce per strategy (the collective needs a graph function)."""

    @tf.function
    def total(value: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(tf.identity, args=(value,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return total


def fit_to_devices(hparams: HParams, gpus: int | None = None) -> HParams:
    """XLA only where it pays (a GPU; default: those visible); the training precision is the
    plan's (trainer_module/budget.py), the export's decoding precision the export's to decide
    (export.decoding_copy: its probe times the trained model)."""
    if gpus is None:
        gpus = len(tf.config.list_physical_devices("GPU"))
    if hparams.use_xla and not gpus:
        _LOG.info("No GPU: training without XLA (the profile enables it for GPUs).")
    return dataclasses.replace(hparams, use_xla=hparams.use_xla and bool(gpus))
