"""Decoding speed of exported models, as `nmt translate` and `nmt evaluate` decode: greedy
(`serving_default`) against beam search (`beam_search`), batches in the input's order against
batches of similar lengths; sentences per second and milliseconds per sentence, in alternating
rounds on the same sentences (every model and variant once per round, so several models are
compared side by side), with how many outputs run past 30 words (repetition loops, which
keep their batch decoding up to the length limit). A change to the model or the export reruns
it (BENCHMARKS.md, "Decoding speed"); `reexport.py` exports the same weights with
a changed export. Each result records `decoding_code`, the fingerprint of the code it measured
(DECODING_CODE), and tests/test_benchmarks_import.py fails until some result matches the
checkout's: a change to that code is not done until its decoding speed is measured.

Usage: python -m benchmarks.translate_speed --model DIR [--model DIR2 ...]
           --source ../shared/data/tatoeba-dev/X.eng
           [--rounds 2] [--lines N] [--output benchmarks/results/translate_speed.json]
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import os
import time

from benchmarks import results
from inference import translate

LONG_OUTPUT_WORDS = 30
# What decides how fast an exported model decodes, besides its weights: the model, the decoders,
# the export's graph and sentence splitting, and the client's batching.
DECODING_CODE = ("trainer_module/model.py", "trainer_module/positions.py",
                 "trainer_module/decoding.py",
                 "trainer_module/export.py", "trainer_module/segmentation.py",
                 "inference/translate.py")


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def decoding_code_fingerprint(repo: str = os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), paths: tuple[str, ...] = DECODING_CODE) -> str:
    """16 hex digits over the top-level statements of `paths`, imports left out, as a sorted
    set: comments, docstrings, layout, and moving a definition from one of these files to
    another (or a file to another folder) do not count; any change to what the code does
    does."""
    statements = []
    for path in paths:
        with open(os.path.join(repo, path), encoding="utf-8") as f:
            tree = _without_docstrings(ast.parse(f.read()))
        statements += [ast.dump(node) for node in tree.body
                       if not isinstance(node, (ast.Import, ast.ImportFrom))]
    digest = hashlib.sha256()
    for statement in sorted(statements):
        digest.update(statement.encode() + b"\0")
    return digest.hexdigest()[:16]


def _variants(model_dir: str) -> dict[str, tuple[int | None, bool]]:
    """Variant name -> (beam width or None for greedy, batches by length)."""
    width = translate.exported_beam_width(model_dir)
    return {"greedy, by length": (None, True), "greedy, input order": (None, False),
            f"beam {width}, by length": (width, True),
            f"beam {width}, input order": (width, False)}


def measure(model_dirs: list[str], sentences: list[str], rounds: int) -> dict:
    variants = {model_dir: _variants(model_dir) for model_dir in model_dirs}
    seconds = {(m, name): [] for m in model_dirs for name in variants[m]}
    long_outputs = {}
    for _ in range(rounds):  # alternating: every model and variant once per round
        for (model_dir, name), times in seconds.items():
            beam, by_length = variants[model_dir][name]
            clock = {}
            outputs = translate.translate(
                sentences, model_dir, beam, by_length=by_length,
                progress=lambda done: clock.setdefault(done, time.perf_counter()))
            times.append(clock[len(sentences)] - clock[0])  # the model's load excluded
            long_outputs[model_dir, name] = sum(len(o.split()) > LONG_OUTPUT_WORDS
                                                for o in outputs)
    return {"decoding_code": decoding_code_fingerprint(), "sentences": len(sentences),
            "rounds": rounds, "batch_size": translate.BATCH_SIZE,
            "models": {m: {name: {"sentences_per_second": [round(len(sentences) / s, 1)
                                                           for s in seconds[m, name]],
                                  "ms_per_sentence": round(1000 * min(seconds[m, name])
                                                           / len(sentences), 2),
                                  f"outputs_over_{LONG_OUTPUT_WORDS}_words":
                                      long_outputs[m, name]}
                           for name in variants[m]}
                       for m in model_dirs}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, action="append",
                        help="a SavedModel or serving directory (repeat to compare models)")
    parser.add_argument("--source", required=True, help="English sentences, one per line")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--output", default="translate_speed.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    with open(args.source, encoding="utf-8") as f:
        sentences = f.read().splitlines()[:args.lines or None]
    result = measure([translate.resolve_model_dir(m) for m in args.model], sentences,
                     args.rounds)
    results.emit(args.output, "decoding speed through the serving signatures, greedy and beam "
                 "search, batches by length and in input order", result)


if __name__ == "__main__":
    main()
