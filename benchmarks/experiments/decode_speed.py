"""Decoding speed: our cached in-graph greedy decoder vs. the seeds' method.

The seeds re-run the whole model for every generated token from a Python loop, on a target
padded to a fixed length. Both run on the same weights and inputs, in this process, side by
side; sentences/s and ms/sentence at batch 1 and 64, and whether the tokens agree.

Usage: python -m benchmarks.experiments.decode_speed [--saved-model DIR] [--profile cpu]
           [--repeats 3]
Without --saved-model, a randomly initialized model of the profile's size is used (speed does
not depend on the weights; with random weights few sentences stop early, so both decoders run
to the length limit: the fair worst case).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import tensorflow as tf

from trainer_module import decoding, hparams as hparams_lib
from trainer_module.model import Transformer
from transform_module.tokens import END_ID, PAD_ID, START_ID


def seeds_decode(model: Transformer, source_ids: tf.Tensor, max_length: int) -> np.ndarray:
    """The seeds' loop: a full forward pass per token, target padded to max_length."""
    batch = source_ids.shape[0]
    target = np.full((batch, max_length + 1), PAD_ID, np.int32)
    target[:, 0] = START_ID
    done = np.zeros(batch, bool)
    for step in range(max_length):
        logits = model((source_ids, tf.constant(target[:, :-1])), training=False)
        scores = logits[:, step, :].numpy()
        scores[:, [PAD_ID, START_ID]] = -np.inf  # the same decision rule as ours
        token = np.argmax(scores, axis=-1)
        token = np.where(done, PAD_ID, token)
        target[:, step + 1] = token
        done |= token == END_ID
        if done.all():
            break
    return target[:, 1:]


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: tracing / graph building not counted
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--vocab-size", type=int, default=8004)
    parser.add_argument("--source-length", type=int, default=12)
    parser.add_argument("--max-length", type=int, default=20, help="the seeds' length")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tf.random.set_seed(0)
    hparams = hparams_lib.get_profile(args.profile).with_vocab_sizes(
        args.vocab_size, args.vocab_size)
    model = Transformer(hparams)
    rng = np.random.default_rng(0)
    results = {"profile": args.profile, "max_length": args.max_length, "batches": {}}
    cached = tf.function(lambda s: decoding.greedy_decode(model, s, args.max_length)[0])
    for batch in (1, 64):
        source = tf.constant(rng.integers(4, args.vocab_size, (batch, args.source_length)),
                             tf.int32)
        ours = timed(lambda: cached(source).numpy(), args.repeats)
        seeds = timed(lambda: seeds_decode(model, source, args.max_length), args.repeats)
        ours_tokens = cached(source).numpy()
        seeds_tokens = seeds_decode(model, source, args.max_length)[:, :ours_tokens.shape[1]]
        results["batches"][batch] = {
            "ours_sentences_per_s": round(batch / ours, 1),
            "ours_ms_per_sentence": round(1000 * ours / batch, 2),
            "seeds_sentences_per_s": round(batch / seeds, 1),
            "seeds_ms_per_sentence": round(1000 * seeds / batch, 2),
            "speedup": round(seeds / ours, 1),
            "same_tokens": bool((ours_tokens == seeds_tokens).all()),
        }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
