"""Transform's tokenization settings side by side, on the full fra.txt: round trips of the French
references through normalize -> tokenize -> WordPiece -> detokenize, pieces per sentence,
vocabulary sizes and [UNK] rates. No model is trained.

Usage: FRA_TXT=../shared/data/fra-eng/fra.txt python benchmarks/experiments/tokenization.py \
    [--min-count 3] > benchmarks/results/results_tokenization.json   (progress on stderr)

Per setting, the real preprocessing_fn runs in tf.Transform (Beam, in memory) on the train split
(ExampleGen's own 80/10/10 hash split): it learns the vocabularies, and the resulting Transform
graph tokenizes the eval split's examples as serving does. The French pieces of each reference
are turned back into text with `detokenize`, as the exported model does with its output.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import re
import sys
import time

import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.example_gen.base_example_gen_executor import _PartitionFn

from components.fra_example_gen.component import SPLIT_NAMES, split_output_config
from components.fra_example_gen.executor import to_example
from components.fra_example_gen.parser import parse_stream
from transform_module import preprocessing as pp
from transform_module.tokens import UNK_ID

# Each row changes one thing on top of the previous default; "before" is the code before this
# benchmark's issue (separators split off numbers).
SETTINGS = {
    "before": {"whole_numbers": False},
    "whole_numbers": {},
    "whole_numbers+split_elisions": {"split_elisions": True},
    "whole_numbers+joint_vocabulary": {"joint_vocabulary": True},
    "whole_numbers+min_count": {},  # wordpiece_min_count from --min-count
}
_DIGIT = re.compile(r"\d")
_ELIDED = re.compile(r"(?i)(^|\s)(l|d|j|qu|n|s|c|m|t|jusqu|lorsqu|puisqu)['’]\w")
_SPACES = re.compile(r"\s+")  # str's \s: also (narrow) no-break spaces, which NFKC makes spaces
RAW_SPEC = {pp.ENGLISH: tf.io.FixedLenFeature([1], tf.string),
            pp.FRENCH: tf.io.VarLenFeature(tf.string)}  # as schemas/schema.pbtxt


def read_splits(path: str) -> dict[str, list[tuple[str, list[str]]]]:
    """(English, all French references) per split, exactly as FraTxtExampleGen splits them."""
    references = collections.defaultdict(list)
    with open(path, "rb") as f:
        for line in parse_stream(f):
            if line.kept:
                references[line.english].append(line.french)
    config = split_output_config((80, 10, 10)).split_config
    buckets = list(itertools.accumulate(s.hash_buckets for s in config.splits))
    splits = {name: [] for name in SPLIT_NAMES}
    for english, french in references.items():
        index = _PartitionFn(to_example(english, list(enumerate(french))), len(buckets),
                             buckets, config)
        splits[SPLIT_NAMES[index]].append((english, french))
    return splits


def measure(output: tft.TFTransformOutput, examples: list[tuple[str, list[str]]],
            custom_config: dict) -> dict:
    """Per side: tokens per sentence and [UNK] rates; French: round trips, words kept whole."""
    settings = pp.TransformSettings.from_config(custom_config)
    layer = output.transform_features_layer()
    pieces = tf.constant([t.encode() for t in pp.RESERVED_TOKENS]
                         + output.vocabulary_by_name(pp.TARGET_VOCAB))
    counts = collections.Counter()
    failures = []
    for start in range(0, len(examples), 2048):
        batch = examples[start:start + 2048]
        serialized = tf.constant([to_example(e, list(enumerate(f))).SerializeToString()
                                  for e, f in batch])
        features = layer(tf.io.parse_example(serialized, RAW_SPEC))
        references = [r for _, f in batch for r in f]
        words = pp.tokenize(tf.constant(references), settings.whole_numbers,
                            settings.split_elisions)
        for side, ids in (("english", features[pp.SOURCE_IDS]),
                          ("french", features[pp.TARGET_IDS].values)):
            counts[f"{side}_sentences"] += int(ids.nrows())
            counts[f"{side}_tokens"] += int(tf.size(ids.flat_values))
            unk = tf.reduce_sum(tf.cast(tf.equal(ids, UNK_ID), tf.int32), axis=1)
            counts[f"{side}_unk"] += int(tf.reduce_sum(unk))
            counts[f"{side}_sentences_with_unk"] += int(tf.math.count_nonzero(unk))
        counts["french_words"] += int(tf.size(words.flat_values))
        counts["french_words_one_piece"] += int(tf.math.count_nonzero(
            _pieces_per_word(output, words).row_lengths() == 1))
        texts = pp.detokenize(tf.gather(pieces, features[pp.TARGET_IDS].values)).numpy()
        for reference, text in zip(references, texts):
            text = text.decode()
            kinds = ["all"] + (["with_digits"] if _DIGIT.search(reference) else []) + (
                ["with_elisions"] if _ELIDED.search(reference) else [])
            for kind in kinds:
                counts[f"{kind}_references"] += 1
                counts[f"{kind}_exact"] += text == reference
                counts[f"{kind}_same_up_to_spaces"] += \
                    _SPACES.sub(" ", text).strip() == _SPACES.sub(" ", reference).strip()
            if _SPACES.sub(" ", text).strip() != _SPACES.sub(" ", reference).strip():
                failures.append((reference, text))
    result = {"vocabulary_size": {side: output.vocabulary_size_by_name(name) for side, name in
                                  (("english", pp.SOURCE_VOCAB), ("french", pp.TARGET_VOCAB))},
              "joint_vocabulary": pp.shares_vocabulary(output)}
    for side in ("english", "french"):
        result[side] = {
            "tokens_per_sentence": round(counts[f"{side}_tokens"] / counts[f"{side}_sentences"], 3),
            "unk_token_rate": round(counts[f"{side}_unk"] / counts[f"{side}_tokens"], 6),
            "sentences_with_unk": counts[f"{side}_sentences_with_unk"]}
    result["french"]["words_per_sentence"] = round(
        counts["french_words"] / counts["french_sentences"], 3)
    result["french"]["words_kept_whole"] = round(
        counts["french_words_one_piece"] / counts["french_words"], 4)
    result["round_trip"] = {kind: {
        "references": counts[f"{kind}_references"],
        "exact": round(counts[f"{kind}_exact"] / counts[f"{kind}_references"], 4),
        "same_up_to_spaces": round(counts[f"{kind}_same_up_to_spaces"]
                                   / counts[f"{kind}_references"], 4)}
        for kind in ("all", "with_digits", "with_elisions")}
    result["round_trip_failures_sample"] = [
        {"reference": r, "detokenized": t} for r, t in failures[:: max(1, len(failures) // 12)]]
    return result


def _pieces_per_word(output: tft.TFTransformOutput, words: tf.RaggedTensor) -> tf.RaggedTensor:
    """[N, (P)] the French vocabulary's pieces of each of the N words, by Transform's lookup."""
    lookup, _ = pp._wordpiece_lookup(words.flat_values[:, None],
                                     output.vocabulary_file_by_name(pp.TARGET_VOCAB))
    return lookup


def distinct_french_words(train: list[tuple[str, list[str]]], custom_config: dict) -> int:
    """Distinct French words of the train split (the WordPiece learner's input)."""
    settings = pp.TransformSettings.from_config(custom_config)
    seen = set()
    references = [r for _, f in train for r in f]
    for start in range(0, len(references), 8192):
        words = pp.tokenize(tf.constant(references[start:start + 8192]), settings.whole_numbers,
                            settings.split_elisions)
        seen.update(words.flat_values.numpy())
    return len(seen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", default=os.environ.get("FRA_TXT"))
    parser.add_argument("--min-count", type=int, default=3,
                        help="wordpiece_min_count of the last setting (default of the others: 10)")
    parser.add_argument("--split", default="eval", help="split to tokenize")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS),
                        help="run only these (each is ~3.5 CPU-minutes: a full Transform "
                             "analysis; all five take ~17)")
    args = parser.parse_args()
    if not args.data:
        parser.error("pass --data or set FRA_TXT")
    splits = read_splits(args.data)
    results = {"data": os.path.abspath(args.data), "split": args.split,
               "examples": {name: len(rows) for name, rows in splits.items()}, "settings": {}}
    for name in args.settings:
        overrides = SETTINGS[name]
        config = {**overrides, **({"wordpiece_min_count": args.min_count}
                                  if name.endswith("min_count") else {})}
        start = time.monotonic()
        output = pp.analyze_in_memory(
            [{pp.ENGLISH: [e], pp.FRENCH: f} for e, f in splits["train"]], config)
        learned = time.monotonic() - start
        results["settings"][name] = {
            "custom_config": config, "analyze_seconds": round(learned, 1),
            "distinct_train_french_words": distinct_french_words(splits["train"], config),
            **measure(output, splits[args.split], config)}
        print(name, json.dumps(results["settings"][name]), file=sys.stderr, flush=True)
    print(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
