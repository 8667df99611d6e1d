"""Decoding speed of an exported model, as `nmt translate` and `nmt evaluate` decode: greedy
(`serving_default`) against beam search (`beam_search`), batches in the input's order against
batches of similar lengths; sentences per second and milliseconds per sentence, in alternating
rounds on the same sentences, with how many outputs run past 30 words (repetition loops, which
keep their batch decoding up to the length limit). A change to the model or the export reruns
it (BENCHMARKS.md, "Decoding speed").

Usage: python -m benchmarks.translate_speed --model DIR --source ../shared/data/tatoeba-dev/X.eng
           [--rounds 2] [--lines N] [--output benchmarks/results/translate_speed.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

from pipeline import translate

LONG_OUTPUT_WORDS = 30


def measure(model_dir: str, sentences: list[str], rounds: int) -> dict:
    width = translate.exported_beam_width(model_dir)
    variants = {"greedy, by length": (None, True), "greedy, input order": (None, False),
                f"beam {width}, by length": (width, True),
                f"beam {width}, input order": (width, False)}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    long_outputs = {}
    for _ in range(rounds):  # alternating: every variant once per round
        for name, (beam, by_length) in variants.items():
            clock = {}
            outputs = translate.translate(
                sentences, model_dir, beam, by_length=by_length,
                progress=lambda done: clock.setdefault(done, time.perf_counter()))
            seconds[name].append(clock[len(sentences)] - clock[0])  # the model's load excluded
            long_outputs[name] = sum(len(o.split()) > LONG_OUTPUT_WORDS for o in outputs)
    return {"model": model_dir, "sentences": len(sentences), "rounds": rounds,
            "batch_size": translate.BATCH_SIZE, "machine": platform.processor() or
            platform.machine(), "cpu_threads": os.cpu_count(),
            "variants": {name: {"sentences_per_second": [round(len(sentences) / s, 1)
                                                         for s in seconds[name]],
                                "ms_per_sentence": round(1000 * min(seconds[name])
                                                         / len(sentences), 2),
                                f"outputs_over_{LONG_OUTPUT_WORDS}_words": long_outputs[name]}
                         for name in variants}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a SavedModel or serving directory")
    parser.add_argument("--source", required=True, help="English sentences, one per line")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--output", default=os.path.join(os.path.dirname(__file__), "results",
                                                         "translate_speed.json"))
    args = parser.parse_args()
    with open(args.source, encoding="utf-8") as f:
        sentences = f.read().splitlines()[:args.lines or None]
    result = measure(translate.resolve_model_dir(args.model), sentences, args.rounds)
    with open(args.output, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
