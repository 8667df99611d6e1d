"""Time of learning the WordPiece vocabularies from fra.txt's words: tensorflow-text's
`learner_lib.learn` (its full threshold search) against `transform_module.wordpiece.learn_pieces`
(no search where it cannot succeed), and whether the two give the same pieces.

The words are counted as Transform counts them (`preprocessing.tokenize`; English once per
distinct sentence, French once per reference), over the whole file rather than the train split.
Per language the two learners run in alternating order, `--rounds` times.

    PYTHONPATH=. .venv/bin/python benchmarks/experiments/wordpiece_learning.py \\
        --data ../shared/data/fra-eng/fra.txt --rounds 1 \\
        --out benchmarks/results/results_wordpiece_learning.json
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import time

import tensorflow as tf

from benchmarks.scale import machine_info
from transform_module import preprocessing, wordpiece
from transform_module.tokens import DEFAULT_VOCAB_SIZE, DEFAULT_WORDPIECE_MIN_COUNT


def word_counts(sentences: list[str], split_elisions: bool) -> list[tuple[str, int]]:
    counts: collections.Counter = collections.Counter()
    for start in range(0, len(sentences), 20_000):
        words = preprocessing.tokenize(tf.constant(sentences[start:start + 20_000]),
                                       split_elisions=split_elisions)
        counts.update(words.flat_values.numpy().tolist())
    return [(w.decode(), c) for w, c in counts.items() if w]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE)
    parser.add_argument("--min-count", type=int, default=DEFAULT_WORDPIECE_MIN_COUNT)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    english, french = {}, []
    with open(args.data, encoding="utf-8") as f:
        for line in f:
            source, target = line.rstrip("\n").split("\t")[:2]
            english[source] = None
            french.append(target)
    learners = {
        "tensorflow_text_learn": lambda words: wordpiece.learner_lib.learn(
            words, args.vocab_size, reserved_tokens=[], lower_thresh=args.min_count,
            joiner=wordpiece.WORDPIECE_JOINER),
        "learn_pieces": lambda words: wordpiece.learn_pieces(
            words, args.vocab_size, args.min_count)}
    results = {"machine": machine_info(), "vocab_size": args.vocab_size,
               "min_count": args.min_count, "rounds": args.rounds, "languages": {}}
    for language, sentences, elisions in (("english", list(english), False),
                                          ("french", french, True)):
        words = word_counts(sentences, elisions)
        seconds: dict[str, list[float]] = {name: [] for name in learners}
        pieces: dict[str, list[str]] = {}
        for round_ in range(args.rounds):
            order = list(learners) if round_ % 2 == 0 else list(reversed(learners))
            for name in order:
                start = time.monotonic()
                pieces[name] = learners[name](words)
                seconds[name].append(time.monotonic() - start)
        results["languages"][language] = {
            "distinct_words": len(words), "pieces": len(pieces["learn_pieces"]),
            "identical": pieces["learn_pieces"] == pieces["tensorflow_text_learn"],
            "seconds": seconds,
            "median_seconds": {name: statistics.median(s) for name, s in seconds.items()}}
        print(language, json.dumps(results["languages"][language]), flush=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
