"""Where the gap between the eval split's BLEU and BLEU on new sentences comes from, on one
model: the eval split with all references, then with one; the eval split reweighted to the dev
set's English lengths; the eval split without the near-copies of training sentences; and the
shared dev set itself (single-reference Tatoeba sentences absent from fra.txt).

Usage: python -m benchmarks.gap --pipeline-root ROOT --dev ../shared/data/tatoeba-dev/X.eng
           [--model DIR] [--output gap.json]
The model defaults to the newest version pushed under the root; translations are greedy,
through its serving signature, as `nmt evaluate` makes them.
"""
from __future__ import annotations

import argparse
import collections
import os
import re

import numpy as np

from benchmarks import results
from benchmarks.pipeline_outputs import latest
from benchmarks.quality import bucket_of, score
from components.fra_example_gen.records import read_split
from components.tfma_metrics import CorpusStatistics
from pipeline import config as config_lib
from inference import translate
from inference.evaluate import Progress
from inference.overlap import normalize

BOOTSTRAP_SAMPLES = 1000
# Contractions written out, so "He's not in." and "He is not in." share a key. 's and 'd are
# ambiguous (is/has, would/had): one reading is enough to find near-copies.
_CONTRACTIONS = [(re.compile(pattern), words) for pattern, words in (
    (r"\bcan't\b", "can not"), (r"\bwon't\b", "will not"), (r"\bshan't\b", "shall not"),
    (r"n't\b", " not"), (r"'re\b", " are"), (r"'ve\b", " have"), (r"'ll\b", " will"),
    (r"'d\b", " would"), (r"\bi'm\b", "i am"), (r"\b(he|she|it|that|what|there|who|where|"
                                                r"here|how)'s\b", r"\1 is"))]


def near_copy_key(sentence: str) -> str:
    """What near-copies share: case, punctuation, spacing and contractions aside."""
    text = sentence.casefold().replace("\u2019", "'")
    for pattern, words in _CONTRACTIONS:
        text = pattern.sub(words, text)
    return normalize(text).replace("cannot", "can not")


_BLEU = CorpusStatistics("bleu", {})  # the Evaluator's: sacreBLEU's defaults


def bleu_statistics(hypotheses: list[str], references: list[list[str]]) -> np.ndarray:
    """sacreBLEU's per-sentence sufficient statistics (one row per sentence), so corpus BLEU
    of any weighting or resample is exact: the statistics summed, then scored once."""
    return np.array([_BLEU.segment(h, refs) for h, refs in zip(hypotheses, references)],
                    dtype=np.float64)


def bleu_of(statistics: np.ndarray, weights: np.ndarray | None = None) -> float:
    totals = statistics.sum(axis=0) if weights is None else weights @ statistics
    return _BLEU.score(list(totals))


def bootstrap_std(statistics: np.ndarray, seed: int = 0) -> float:
    """The standard deviation of corpus BLEU over resamples of the sentences: the noise a
    difference must exceed."""
    rng = np.random.default_rng(seed)
    n = len(statistics)
    return float(np.std([bleu_of(statistics[rng.integers(0, n, n)])
                         for _ in range(BOOTSTRAP_SAMPLES)]))


def length_weights(english: list[str], target: list[str]) -> np.ndarray:
    """Per sentence of `english`, the weight that gives its length buckets the shares they
    have in `target`."""
    have = collections.Counter(bucket_of(s) for s in english)
    want = collections.Counter(bucket_of(s) for s in target)
    return np.array([want[bucket_of(s)] / len(target) / (have[bucket_of(s)] / len(english))
                     for s in english])


def translate_all(model_dir: str, sentences: list[str], what: str) -> list[str]:
    print(f"Translating {len(sentences):,} sentences of {what}.", flush=True)
    return translate.translate(sentences, model_dir, progress=Progress(len(sentences)))


def measure(pipeline_root: str, dev_source: str, model_dir: str) -> dict:
    examples = latest(os.path.join(pipeline_root, "FraTxtExampleGen", "examples", "*"))
    rows = read_split(examples, "eval")
    english, references = [e for e, _ in rows], [r for _, r in rows]
    with open(dev_source, encoding="utf-8") as f:
        dev_english = f.read().splitlines()
    with open(dev_source.removesuffix(".eng") + ".fra", encoding="utf-8") as f:
        dev_french = f.read().splitlines()
    hypotheses = translate_all(model_dir, english, "the eval split")
    dev_hypotheses = translate_all(model_dir, dev_english, "the dev set")

    first = [r[:1] for r in references]
    single = bleu_statistics(hypotheses, first)
    weights = length_weights(english, dev_english)
    trained = {near_copy_key(e) for e, _ in read_split(examples, "train")}
    copies = np.array([near_copy_key(e) in trained for e in english])
    dev = bleu_statistics(dev_hypotheses, [[r] for r in dev_french])
    return {
        "model": model_dir, "eval_sentences": len(english), "dev_sentences": len(dev_english),
        "references_per_eval_sentence": sum(map(len, references)) / len(references),
        "rows": {
            "eval, all references": score(hypotheses, references)["bleu"],
            "eval, first reference": bleu_of(single),
            "eval, first reference, reweighted to the dev set's lengths": bleu_of(
                single, weights),
            "eval, first reference, without near-copies of training sentences": bleu_of(
                single[~copies]),
            "dev set (one reference)": bleu_of(dev)},
        "eval_first_reference_bootstrap_std": bootstrap_std(single),
        "dev_bootstrap_std": bootstrap_std(dev),
        "eval_near_copies_of_training": int(copies.sum()),
        "eval_by_length_first_reference": {
            bucket: {"sentences": int(sum(b == bucket for b in map(bucket_of, english))),
                     "bleu": bleu_of(single[[bucket_of(e) == bucket for e in english]])}
            for bucket in sorted(set(map(bucket_of, english)))},
        "dev_by_length": {
            bucket: {"sentences": int(sum(b == bucket for b in map(bucket_of, dev_english))),
                     "bleu": bleu_of(dev[[bucket_of(e) == bucket for e in dev_english]])}
            for bucket in sorted(set(map(bucket_of, dev_english)))},
        "signature": score(dev_hypotheses, [[r] for r in dev_french])["bleu_signature"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--dev", required=True, help="the dev set's English file (.eng)")
    parser.add_argument("--model", help="default: the newest pushed version under the root")
    parser.add_argument("--output", default="gap.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    model_dir = translate.resolve_model_dir(args.model or config_lib.PipelineConfig(
        data_path="", pipeline_root=args.pipeline_root).serving_dir)
    result = measure(args.pipeline_root, args.dev, model_dir)
    rows = result["rows"]
    result = {  # the gap in three parts, as BENCHMARKS.md shows it
        "references": rows["eval, first reference"] - rows["eval, all references"],
        "lengths": rows["eval, first reference, reweighted to the dev set's lengths"]
        - rows["eval, first reference"],
        "content": rows["dev set (one reference)"]
        - rows["eval, first reference, reweighted to the dev set's lengths"], **result}
    results.emit(args.output, "where the gap between eval-split BLEU and dev-set BLEU comes "
                 "from, on one model", result)


if __name__ == "__main__":
    main()
