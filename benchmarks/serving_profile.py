"""Where the serving signature's time goes (issue #67): the dev set in input order, in batches
of 64 as `nmt translate --no-sort` sends them, through each stage of `export.Translator` timed
on its own, beside the whole signature.

Stages: splitting lines into sentences; counting each sentence's tokens (to decide whether to
cut it at its clauses); tokenization (normalization and SentencePiece, Transform's graph); the
encoder; the decode loop without and with the loop guard (greedy), and with beam search; and
joining the pieces back into text. The share of the greedy loop's row-steps spent on rows that
had already ended (the batch runs until its longest translation ends) is counted from the
outputs.

    PYTHONPATH=. .venv/bin/python -m benchmarks.serving_profile \\
        --model RUN/Trainer/model/N/Format-Serving \\
        --transform-graph RUN/Transform/transform_graph/M \\
        --source ../shared/data/tatoeba-dev/tatoeba-test-v2021-08-07.unseen.eng \\
        [--profile cpu] [--hparam NAME=VALUE ...] [--output serving_profile.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exported graph's tokenizer ops)
import tensorflow_transform as tft

from benchmarks import results
from benchmarks.translate_speed import REQUEST_BATCH
from trainer_module import decoding, export, segmentation, task
from trainer_module.hparams import get_profile, parse_override
from transform_module.preprocessing import detokenize
from transform_module.tokens import END_ID

_STRINGS = tf.TensorSpec([None], tf.string)
_IDS = tf.TensorSpec([None, None], tf.int32)


def _stage_functions(translator: export.Translator) -> dict[str, Callable]:
    """Stage name -> a tf.function of one stage, each fed what the one before it returns."""
    model, hparams = translator.model, translator.hparams
    guard = (hparams.decode_loop_ngram, hparams.decode_loop_repeats, translator.spelling)

    def traced(*spec):
        return lambda f: tf.function(tf.autograph.experimental.do_not_convert(f),
                                     input_signature=list(spec))

    @traced(_STRINGS)
    def split(english):
        return segmentation.split_sentences(english).flat_values

    @traced(_STRINGS)
    def count_tokens(sentences):
        return translator.chunks(sentences)[0].flat_values

    @traced(_STRINGS)
    def tokenize(pieces):
        return translator.source_ids(pieces)[0]

    @traced(_IDS)
    def encode(source_ids):
        return model.encode(source_ids)[0]

    def greedy(source_ids, ngram, repeats, spelling):
        limits = decoding.max_decode_length(source_ids, hparams)
        memory, source_mask = model.encode(source_ids)
        cache = model.init_cache(memory, source_mask)
        return decoding._greedy_loop(model.decode_step, cache, limits, tf.reduce_max(limits),
                                     ngram, repeats, spelling)[0]

    @traced(_IDS)
    def greedy_loop(source_ids):
        return greedy(source_ids, 0, 0, None)

    @traced(_IDS)
    def greedy_loop_guarded(source_ids):
        return greedy(source_ids, *guard)

    @traced(_IDS)
    def beam_loop_guarded(source_ids):
        return decoding.beam_search_decode(
            model, source_ids, decoding.max_decode_length(source_ids, hparams),
            hparams.beam_width, hparams.beam_alpha, *guard)[0]

    @traced(_IDS)
    def join(token_ids):
        return detokenize(tf.gather(translator.target_tokens, token_ids))

    return {"split sentences": split, "count tokens (clause cuts)": count_tokens,
            "tokenize": tokenize, "encoder": encode, "greedy loop, no guard": greedy_loop,
            "greedy loop": greedy_loop_guarded, "beam loop": beam_loop_guarded,
            "join pieces": join}


def _ended_share(token_ids: np.ndarray) -> tuple[int, int]:
    """(row-steps run, row-steps of rows still translating) of one greedy batch."""
    rows, steps = token_ids.shape
    ended_at = np.where((token_ids == END_ID).any(axis=1), (token_ids == END_ID).argmax(axis=1) + 1,
                        steps)
    return rows * steps, int(ended_at.sum())


def profile(translator: export.Translator, lines: list[str], rounds: int) -> dict:
    stages = _stage_functions(translator)
    batches = [lines[i:i + REQUEST_BATCH] for i in range(0, len(lines), REQUEST_BATCH)]
    seconds = {name: 0.0 for name in ("whole signature, greedy", "whole signature, beam",
                                      *stages)}
    run_steps = live_steps = 0

    def timed(name: str, function: Callable, *args):
        start = time.perf_counter()
        out = function(*args)
        seconds[name] += time.perf_counter() - start if measuring else 0.0
        return out

    for measuring in (False,) + (True,) * rounds:  # a first pass traces every function
        for batch in batches if measuring else batches[:1]:
            english = tf.constant(batch)
            timed("whole signature, greedy", translator.serve_greedy, english)
            timed("whole signature, beam", translator.serve_beam, english)
            sentences = timed("split sentences", stages["split sentences"], english)
            pieces = timed("count tokens (clause cuts)", stages["count tokens (clause cuts)"],
                           sentences)
            source_ids = timed("tokenize", stages["tokenize"], pieces)
            timed("encoder", stages["encoder"], source_ids)
            timed("greedy loop, no guard", stages["greedy loop, no guard"], source_ids)
            token_ids = timed("greedy loop", stages["greedy loop"], source_ids)
            timed("beam loop", stages["beam loop"], source_ids)
            timed("join pieces", stages["join pieces"], token_ids)
            if measuring:
                run, live = _ended_share(token_ids.numpy())
                run_steps, live_steps = run_steps + run, live_steps + live
    per_round = {name: round(s / rounds, 2) for name, s in seconds.items()}
    whole = per_round["whole signature, greedy"]
    return {"sentences": len(lines), "batch_size": REQUEST_BATCH, "rounds": rounds,
            "order": "input", "seconds": per_round,
            "share_of_greedy_signature": {
                name: round(per_round[name] / whole, 3) for name in (
                    "split sentences", "count tokens (clause cuts)", "tokenize", "encoder",
                    "greedy loop", "join pieces")},
            "loop_guard_share_of_greedy_loop": round(
                1 - per_round["greedy loop, no guard"] / per_round["greedy loop"], 3),
            "greedy_row_steps_of_ended_rows": round(1 - live_steps / run_steps, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the Trainer's SavedModel")
    parser.add_argument("--transform-graph", required=True, help="the Transform output it used")
    parser.add_argument("--source", required=True, help="English sentences, one per line")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--hparam", action="append", default=[], type=parse_override)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--output", default="serving_profile.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    output = tft.TFTransformOutput(args.transform_graph)
    hparams, model = task.exportable_model(
        dataclasses.replace(get_profile(args.profile), **dict(args.hparam)), output)
    model.set_weights([v.numpy() for v in tf.saved_model.load(args.model).model_variables])
    with open(args.source, encoding="utf-8") as f:
        lines = f.read().splitlines()[:args.lines or None]
    results.emit(args.output, "where the serving signature's time goes: each stage of the "
                 "export's Translator timed on its own, the dev set in input order",
                 profile(export.Translator(model, output, hparams), lines, args.rounds))


if __name__ == "__main__":
    main()
