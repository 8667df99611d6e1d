"""Decoding speed of exported models through the signatures `nmt translate` and `nmt evaluate`
call, in requests of REQUEST_BATCH sentences (a TF Serving client's): greedy
(`serving_default`) against beam search (`beam_search`), batches in the input's order against
batches of similar lengths; sentences per second and milliseconds per sentence after the
first request, and the first request's seconds (the model loaded, TensorFlow optimizes the
signature's graph at its first call), in alternating rounds on the same sentences (every
model and variant once per round, so several models are compared side by side), with how
many outputs run past 30 words (repetition loops, which keep their batch decoding up to the
length limit). A change to the model or the export reruns
it (BENCHMARKS.md, "Decoding speed"); `reexport.py` exports the same weights with
a changed export. Each result records `decoding_code`, the fingerprint of the code it measured
(DECODING_CODE), and tests/test_benchmarks_import.py fails until some result matches the
checkout's: a change to that code is not done until its decoding speed is measured.

With --side-by-side, the process is set up as `nmt translate` sets up its own
(`translate.set_up_serving`: one thread per op, the graphs without Grappler) and
sends as many requests at once as it has cores, as concurrent clients of a model server set
that way would.
With --batch-one-lines, also one sentence per request; with --reference, `nmt evaluate` on
the whole source; with --peak-memory-lines, each model's serving process's peak memory. Every
model after the first is compared with it line by line (its outputs that differ).

Usage: python -m benchmarks.translate_speed --model DIR [--model DIR2 ...]
           --source ../shared/data/tatoeba-dev/X.eng [--reference X.fra]
           [--rounds 2] [--lines N] [--batch-one-lines N] [--peak-memory-lines N]
           [--output benchmarks/results/translate_speed.json]
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import time

from benchmarks import results
from inference import translate

LONG_OUTPUT_WORDS = 30
# Sentences per request in the batched variants: a TF Serving client's size, the batch of
# issue #67's figures (`nmt translate` and `nmt evaluate` send translate.BATCH_SIZE).
REQUEST_BATCH = 64
# What decides how fast an exported model decodes, besides its weights: the model, the decoders,
# the export's graph and sentence splitting, and `nmt translate`'s batching (this script's own
# requests are REQUEST_BATCH).
DECODING_CODE = ("trainer_module/model.py", "trainer_module/positions.py",
                 "trainer_module/decoding.py",
                 "trainer_module/export.py", "trainer_module/segmentation.py",
                 "inference/translate.py", "components/graph_optimization.py")


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


def _variants(model_dir: str, batch_one: bool) -> dict[str, tuple[int | None, bool, int]]:
    """Variant name -> (beam width or None for greedy, batches by length, batch size)."""
    width = translate.exported_beam_width(model_dir)
    batch = REQUEST_BATCH
    variants = {"greedy, by length": (None, True, batch),
                "greedy, input order": (None, False, batch),
                f"beam {width}, by length": (width, True, batch),
                f"beam {width}, input order": (width, False, batch)}
    if batch_one:
        variants.update({"greedy, batch 1": (None, False, 1),
                         f"beam {width}, batch 1": (width, False, 1)})
    return variants


def _evaluate(model_dir: str, source: str, reference: str) -> dict:
    """`nmt evaluate` of the model on the whole test set, as a user runs it: its wall time
    (the model's load included), its own sentences per second, BLEU and chrF."""
    start = time.perf_counter()
    done = subprocess.run([os.path.join(os.path.dirname(sys.executable), "nmt"), "evaluate",
                           "--model", model_dir, "--source", source, "--reference", reference,
                           "--no-overlap-check", "--json"],
                          check=True, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    result = json.loads(done.stdout)
    scores = result["scores"]["all"]
    return {"seconds": seconds, "sentences_per_second": result["sentences_per_second"],
            "bleu": scores["bleu"], "chrf": scores["chrf"]}


# VmHWM, not ru_maxrss: Linux starts an exec'd child's ru_maxrss at its spawner's peak, and
# this process's is that of every model it loaded.
_PEAK = """import sys
from inference import translate
at_once = 1
if sys.argv[4] == "side by side":
    at_once = translate.set_up_serving()
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:int(sys.argv[3]) or None]
translate.translate(lines, sys.argv[1], by_length=False, requests_at_once=at_once)
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))"""


def peak_memory_mb(model_dir: str, source: str, lines: int, side_by_side: bool = False
                   ) -> float:
    """The peak resident memory of a process that loads the model and translates `lines`
    lines of `source` greedily in their order, one request at a time or side by side."""
    done = subprocess.run([sys.executable, "-c", _PEAK, model_dir, source, str(lines),
                           "side by side" if side_by_side else "one at a time"],
                          check=True, capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return round(int(done.stdout.split()[-1]) / 1024, 1)


def measure(model_dirs: list[str], sentences: list[str], rounds: int, batch_one_lines: int = 0,
            source: str | None = None, reference: str | None = None,
            requests_at_once: int = 1) -> dict:
    variants = {model_dir: _variants(model_dir, bool(batch_one_lines)) for model_dir in model_dirs}
    seconds = {(m, name): [] for m in model_dirs for name in variants[m]}
    first_request = {key: [] for key in seconds}
    long_outputs, outputs, evaluated = {}, {}, {m: [] for m in model_dirs}
    for _ in range(rounds):  # alternating: every model and variant once per round
        for (model_dir, name), times in seconds.items():
            beam, by_length, batch_size = variants[model_dir][name]
            lines = sentences[:batch_one_lines] if batch_size == 1 else sentences
            clock = {}
            outputs[model_dir, name] = translate.translate(
                lines, model_dir, beam, by_length=by_length, batch_size=batch_size,
                requests_at_once=requests_at_once,
                progress=lambda done: clock.setdefault(done, time.perf_counter()))
            # The first request excluded: TensorFlow optimizes a loaded signature's graph at
            # its first call (a server does that once, before its first user; first_request).
            first_done = min(done for done in clock if done)
            times.append((clock[len(lines)] - clock[first_done]) / (len(lines) - first_done))
            first_request[model_dir, name].append(clock[first_done] - clock[0])
            long_outputs[model_dir, name] = sum(len(o.split()) > LONG_OUTPUT_WORDS
                                                for o in outputs[model_dir, name])
        if reference:
            for model_dir in model_dirs:
                evaluated[model_dir].append(_evaluate(model_dir, source, reference))
    first = model_dirs[0]

    def figures_of(model_dir: str, name: str) -> dict:
        per_sentence = seconds[model_dir, name]
        found = {"sentences": len(outputs[model_dir, name]),
                 "sentences_per_second": [round(1 / s, 1) for s in per_sentence],
                 "ms_per_sentence": round(1000 * min(per_sentence), 2),
                 "first_request_seconds": [round(s, 2) for s in first_request[model_dir, name]],
                 f"outputs_over_{LONG_OUTPUT_WORDS}_words": long_outputs[model_dir, name]}
        if model_dir != first and (first, name) in outputs:
            found["outputs_differing_from_the_first_model"] = sum(
                a != b for a, b in zip(outputs[model_dir, name], outputs[first, name]))
        return found

    result = {"decoding_code": decoding_code_fingerprint(), "sentences": len(sentences),
              "rounds": rounds, "batch_size": REQUEST_BATCH,
              "requests_at_once": requests_at_once,
              "models": {m: {name: figures_of(m, name) for name in variants[m]}
                         for m in model_dirs}}
    if reference:
        result["nmt_evaluate"] = {m: {"seconds": [round(e["seconds"], 1) for e in evaluated[m]],
                                      "sentences_per_second": [round(e["sentences_per_second"], 1)
                                                               for e in evaluated[m]],
                                      "bleu": evaluated[m][0]["bleu"],
                                      "chrf": evaluated[m][0]["chrf"]}
                                  for m in model_dirs}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, action="append",
                        help="a SavedModel or serving directory (repeat to compare models)")
    parser.add_argument("--source", required=True, help="English sentences, one per line")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--batch-one-lines", type=int, default=0,
                        help="also translate the first N lines one at a time (0: not)")
    parser.add_argument("--reference", help="the source's references: also time `nmt "
                        "evaluate` on the whole source, once per model and round")
    parser.add_argument("--peak-memory-lines", type=int, default=0,
                        help="also measure each model's serving process's peak memory, "
                        "translating the first N lines in a process of its own (0: not)")
    parser.add_argument("--side-by-side", action="store_true",
                        help="one thread per op, and a request per core at once")
    parser.add_argument("--output", default="translate_speed.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    requests_at_once = 1
    if args.side_by_side:  # as `nmt translate` sets its process up
        requests_at_once = translate.set_up_serving()
    with open(args.source, encoding="utf-8") as f:
        sentences = f.read().splitlines()[:args.lines or None]
    model_dirs = [translate.resolve_model_dir(m) for m in args.model]
    result = measure(model_dirs, sentences, args.rounds, args.batch_one_lines, args.source,
                     args.reference, requests_at_once)
    if args.peak_memory_lines:
        result["peak_memory_mb"] = {m: peak_memory_mb(m, args.source, args.peak_memory_lines,
                                                      args.side_by_side)
                                    for m in model_dirs}
    results.emit(args.output, "decoding speed through the serving signatures, greedy and beam "
                 "search, batches by length and in input order", result)


if __name__ == "__main__":
    main()
