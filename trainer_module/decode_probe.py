"""The probe behind decode_precision "auto" (devices.resolve_decode_precision): how much faster
the exported model's decoding steps run with bfloat16 weights than with float32 ones on this
CPU, measured on the model itself, as budget.py's probe measures training steps.

Having bfloat16 units is not enough: how much they pay depends on the CPU and on the model's
size (BENCHMARKS.md, "Decoding speed"), and a step is more than its matmuls.
"""
from __future__ import annotations

import time

import tensorflow as tf

from trainer_module import decoding
from trainer_module.model import Transformer
from transform_module.tokens import START_ID

# A sorted sub-batch's rows part-way through decoding, at a short sentence's length: the
# sizes most of the served steps run at (export.DECODE_ROWS rows at first, fewer as sentences
# end).
PROBE_ROWS = 32
PROBE_SOURCE_TOKENS = 16
PROBE_STEPS = 16
PROBE_ROUNDS = 3  # alternating, each precision's best taken: a few seconds in all


def _steps_function(model: Transformer) -> tf.types.experimental.GenericFunction:
    """A tf.function: source ids [PROBE_ROWS, PROBE_SOURCE_TOKENS] -> the last step's tokens
    [PROBE_ROWS], after encoding and PROBE_STEPS greedy steps in which every row decodes (no
    sentence ends, so the work is the same whatever the weights say)."""
    @tf.function(autograph=False)
    def decode_steps(source_ids: tf.Tensor) -> tf.Tensor:
        memory, source_mask = model.encode(source_ids)
        cache = model.init_cache(memory, source_mask)

        def body(step, last, cache):
            logits, cache = model.decode_step(last, step, cache)
            return step + 1, tf.argmax(logits, axis=-1, output_type=tf.int32), cache

        _, last, _ = tf.while_loop(
            lambda step, *_: step < PROBE_STEPS, body,
            (tf.constant(0), tf.fill([PROBE_ROWS], START_ID), cache),
            shape_invariants=(tf.TensorShape([]), tf.TensorShape([None]),
                              decoding.any_batch(cache)))
        return last
    return decode_steps


def bfloat16_speedup(model: Transformer, bfloat16_model: Transformer) -> float:
    """float32 decoding seconds over bfloat16's: `model` (float32 weights) against
    `bfloat16_model` (export.decoding_copy's copy of it), each traced and run once first, then
    PROBE_ROUNDS alternating rounds, each one's fastest round."""
    source_ids = tf.random.stateless_uniform(
        [PROBE_ROWS, PROBE_SOURCE_TOKENS], seed=[0, 0], minval=START_ID + 1,
        maxval=model.hparams.source_vocab_size, dtype=tf.int32)
    runs = [_steps_function(m) for m in (model, bfloat16_model)]
    best = [float("inf")] * len(runs)
    for round_ in range(PROBE_ROUNDS + 1):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run(source_ids).numpy()
            if round_:  # the first round traces
                best[i] = min(best[i], time.perf_counter() - start)
    return best[0] / best[1]
