"""Is a recipe's BLEU gain on the dev set more than noise? A paired bootstrap over sentences.

Usage:
  PYTHONPATH=. .venv/bin/python -m benchmarks.paired --reference $D.fra \
      --baseline a_dev.fra --candidate b_dev.fra [--candidate c_dev.fra ...] [--json OUT] \
      [--source $D.eng]

Each hypothesis file has one translation per reference line (`nmt evaluate --hypotheses`).
For each candidate: corpus BLEU of both, the difference, its standard deviation over 1,000
resamples of the sentences (the same resample for both systems: paired), and the share of
resamples in which the candidate is not better. sacreBLEU's statistics (the Evaluator's
`CorpusStatistics`), so each BLEU equals `sacrebleu REF -i HYP`. With --source (the English),
also both systems' BLEU per English length bucket (`quality.py`'s buckets): where a gain is.
"""
from __future__ import annotations

import argparse

import numpy as np

from benchmarks import results
from benchmarks.gap import BOOTSTRAP_SAMPLES, bleu_of, bleu_statistics
from benchmarks.quality import bucket_of
from transform_module.preprocessing import LENGTH_BUCKETS


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def paired_bootstrap(baseline: np.ndarray, candidate: np.ndarray, seed: int = 0) -> dict:
    """Per-sentence BLEU statistics of two systems on the same sentences -> their BLEU, the
    difference, its bootstrap standard deviation and P(candidate <= baseline)."""
    rng = np.random.default_rng(seed)
    n = len(baseline)
    differences = []
    for _ in range(BOOTSTRAP_SAMPLES):
        sample = rng.integers(0, n, n)
        differences.append(bleu_of(candidate[sample]) - bleu_of(baseline[sample]))
    return {"baseline_bleu": bleu_of(baseline), "candidate_bleu": bleu_of(candidate),
            "difference": bleu_of(candidate) - bleu_of(baseline),
            "bootstrap_std": float(np.std(differences)),
            "p_not_better": float(np.mean(np.array(differences) <= 0))}


def by_length(sources: list[str], baseline: np.ndarray, candidate: np.ndarray) -> dict:
    """{English length bucket: its sentences and both systems' corpus BLEU on them}."""
    buckets = np.array([bucket_of(source) for source in sources])
    return {name: {"sentences": int((buckets == name).sum()),
                   "baseline_bleu": bleu_of(baseline[buckets == name]),
                   "candidate_bleu": bleu_of(candidate[buckets == name])}
            for _, _, name in LENGTH_BUCKETS if (buckets == name).any()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--candidate", action="append", required=True)
    parser.add_argument("--json", help="also write them to this result file (a bare name: in "
                                        "benchmarks/results/)")
    parser.add_argument("--source", help="the English lines: BLEU per English length too")
    args = parser.parse_args(argv)
    references = [[r] for r in read_lines(args.reference)]
    base = bleu_statistics(read_lines(args.baseline), references)
    sources = read_lines(args.source) if args.source else None
    compared = {}
    for path in args.candidate:
        candidate = bleu_statistics(read_lines(path), references)
        result = paired_bootstrap(base, candidate)
        compared[path] = result
        print(f"{path}: BLEU {result['candidate_bleu']:.2f} against {result['baseline_bleu']:.2f}"
              f" ({result['difference']:+.2f}, paired bootstrap sd {result['bootstrap_std']:.2f}"
              f", not better in {100 * result['p_not_better']:.1f} % of resamples)")
        if sources:
            result["by_english_length"] = by_length(sources, base, candidate)
            print("  by English length: " + "; ".join(
                f"{name} words ({b['sentences']}): {b['candidate_bleu']:.2f} against "
                f"{b['baseline_bleu']:.2f}" for name, b in result["by_english_length"].items()))
    if args.json:
        results.write(args.json, "paired bootstrap of dev-set BLEU: candidates against a "
                      "baseline on the same lines", {"baseline": args.baseline,
                                                     "reference": args.reference,
                                                     "candidates": compared})


if __name__ == "__main__":
    main()
