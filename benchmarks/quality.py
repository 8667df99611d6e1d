"""Translation quality on a split: sacreBLEU BLEU and chrF against all references, overall
and per English length bucket, and against the first reference overall, with sacreBLEU's
signatures.

Usage: python benchmarks/quality.py --pipeline-root /work/runs/cpu --model DIR [--model DIR2]
           [--split test] [--batch-size 64] [--output RESULT.json]
--model is a SavedModel (e.g. a pushed version or a Trainer's Format-Serving directory), or
NAME=DIR to name it in the result; several are scored on the same sentences, side by side.
"""
from __future__ import annotations

import argparse
import collections
import os
import time

from benchmarks import results
from benchmarks.pipeline_outputs import latest
from components.fra_example_gen.records import read_split
from inference import evaluate as evaluate_lib
from inference import translate as translate_lib
from transform_module.preprocessing import LENGTH_BUCKETS


def bucket_of(english: str) -> str:
    words = len(english.split())
    return next(name for low, high, name in LENGTH_BUCKETS if high is None or words <= high)


def score(hypotheses: list[str], references: list[list[str]]) -> dict:
    """sacreBLEU BLEU and chrF against every reference of each sentence (nrefs:var)."""
    most = max(len(r) for r in references)
    streams = [[r[i] if i < len(r) else None for r in references] for i in range(most)]
    result = evaluate_lib.score(hypotheses, streams)
    return {"sentences": result.pop("lines"), **result}


def translate(model_dir: str, sentences: list[str], batch_size: int,
              signature_name: str = "serving_default") -> list[str]:
    """Through the serving signatures, as `nmt translate` and `nmt evaluate` decode."""
    beam = translate_lib.exported_beam_width(model_dir) if signature_name == "beam_search" \
        else None
    return translate_lib.translate(sentences, model_dir, beam, batch_size=batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--split", default="test")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--signature", default="serving_default",
                        help="serving_default (greedy) or beam_search")
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args = parser.parse_args()
    scored = evaluate(args.pipeline_root, args.model, args.split, args.batch_size,
                      args.signature)
    results.emit(args.output, f"BLEU and chrF of each model on the {args.split} split", scored)


def evaluate(pipeline_root: str, model_dirs: list[str], split: str, batch_size: int = 64,
             signature_name: str = "serving_default") -> dict:
    """Each model's translations of `split` (ExampleGen's newest output under the root), scored
    overall and per English length bucket, with the decoding time."""
    rows = read_split(
        latest(os.path.join(pipeline_root, "FraTxtExampleGen", "examples", "*")), split)
    english = [e for e, _ in rows]
    references = [r for _, r in rows]
    results = {"split": split, "signature": signature_name, "models": {}}
    for model in model_dirs:
        name, _, model_dir = model.rpartition("=")
        start = time.time()
        hypotheses = translate(model_dir, english, batch_size, signature_name)
        by_bucket = collections.defaultdict(list)
        for i, sentence in enumerate(english):
            by_bucket[bucket_of(sentence)].append(i)
        long = [i for i, sentence in enumerate(english) if len(sentence.split()) > 10]
        results["models"][name or model_dir] = {
            "overall": score(hypotheses, references),
            # As published results are scored: one reference, the first in fra.txt's order.
            "overall_first_reference": score(hypotheses, [r[:1] for r in references]),
            # Sentences people add to Tatoeba later are longer than fra.txt's: this slice is
            # reported beside the overall score so a recipe does not trade it away.
            "over_10_words": {k: v for k, v in score([hypotheses[i] for i in long],
                                                     [references[i] for i in long]).items()
                              if "signature" not in k},
            "by_english_length": {
                bucket: {k: v for k, v in score([hypotheses[i] for i in idx],
                                                [references[i] for i in idx]).items()
                         if "signature" not in k}
                for bucket, idx in sorted(by_bucket.items())},
            "decode_seconds": round(time.time() - start, 1),
            "samples": [{"english": english[i], "translation": hypotheses[i],
                         "references": references[i][:3]} for i in range(0, len(english), 2000)],
        }
    return results


if __name__ == "__main__":
    main()
