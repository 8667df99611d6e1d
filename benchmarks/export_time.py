"""The Trainer's SavedModel export per checkout: how long each checkout's export code takes on
the same trained weights, and whether the exports translate alike.

Each round exports the weights once per checkout, checkouts alternating, each in a fresh
process with that checkout's code, as the Trainer does (one export per process, so its
one-time costs count). The export alone is timed; building the model and reading the
weights are not. Then each checkout's first export is loaded in a fresh process: the load,
the first translation, and the dev set's translations, greedy and beam, which must be the
same for every checkout.

    PYTHONPATH=. .venv/bin/python -m benchmarks.export_time \\
        --model RUN/serving/nmt-fra-eng/VERSION --transform-graph RUN/Transform/transform_graph/N \\
        --checkout DIR_A --checkout DIR_B --dev DEV.eng [--rounds 3] [--output export_time.json]

The model must carry its training record (assets.extra/nmt_training.json): its recipe.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks import results

# Run with a checkout's code (modules every checkout since warm starts has): the recipe from
# the model's record, the weights read into the model the Trainer would export, the export
# timed.
_EXPORT = """
import json, sys, time
import tensorflow as tf, tensorflow_text, tensorflow_transform as tft
from trainer_module import export, task, warm_start
from trainer_module.hparams import HParams
model_dir, graph, out = sys.argv[1:]
output = tft.TFTransformOutput(graph)
hparams, model = task.exportable_model(HParams(**warm_start.base_record(model_dir).hparams), output)
model.set_weights([v.numpy() for v in tf.saved_model.load(model_dir).model_variables])
started = time.perf_counter()
export.export_translator(model, output, hparams, out)
print(json.dumps({"seconds": time.perf_counter() - started}))
"""

# Run in a fresh process per export: load, first translation, and the dev set's translations.
_TRANSLATE = """
import json, sys, time
started = time.perf_counter()
import tensorflow as tf, tensorflow_text
model = tf.saved_model.load(sys.argv[1])
loaded = time.perf_counter()
model.signatures["serving_default"](english=tf.constant(["Go."]))
first = time.perf_counter()
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()[:int(sys.argv[3])]
out = {"load_seconds": loaded - started, "first_translation_seconds": first - loaded}
for name in ("serving_default", "beam_search"):
    out[name] = [t.decode() for i in range(0, len(lines), 64) for t in model.signatures[name](
        english=tf.constant(lines[i:i + 64]))["translation"].numpy()]
print(json.dumps(out))
"""


def _python(checkout: str, program: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", program, *args], cwd=checkout,
                          env={**os.environ, "PYTHONPATH": checkout}, capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"In {checkout}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a pushed SavedModel (trained weights)")
    parser.add_argument("--transform-graph", required=True, help="the Transform output it used")
    parser.add_argument("--checkout", required=True, action="append",
                        help="a checkout whose export code runs (repeat to compare)")
    parser.add_argument("--dev", required=True, help="English lines, one per line")
    parser.add_argument("--dev-lines", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="export_time.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {checkout: [] for checkout in args.checkout}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            order = args.checkout if round_ % 2 == 0 else args.checkout[::-1]
            for checkout in order:
                out = os.path.join(scratch, f"{args.checkout.index(checkout)}-{round_}")
                took = _python(checkout, _EXPORT, args.model, args.transform_graph, out)
                seconds[checkout].append(round(took["seconds"], 2))
                print(f"round {round_ + 1}/{args.rounds} {checkout}: {took['seconds']:.1f} s",
                      file=sys.stderr)
        first_exports = {checkout: os.path.join(scratch, f"{number}-0")
                         for number, checkout in enumerate(args.checkout)}
        served = {checkout: _python(checkout, _TRANSLATE, path, args.dev, str(args.dev_lines))
                  for checkout, path in first_exports.items()}
        sizes = {checkout: directory_bytes(path) for checkout, path in first_exports.items()}
    first = served[args.checkout[0]]
    figures = {"model": args.model, "rounds": args.rounds, "dev_lines": args.dev_lines,
               "checkouts": {}}
    for checkout in args.checkout:
        figures["checkouts"][results.commit(checkout)] = {
            "export_seconds": seconds[checkout],
            "export_median_seconds": statistics.median(seconds[checkout]),
            "bytes": sizes[checkout],
            "load_seconds": round(served[checkout]["load_seconds"], 2),
            "first_translation_seconds": round(served[checkout]["first_translation_seconds"], 2),
            "translations_differing_from_first_checkout": {
                name: sum(a != b for a, b in zip(first[name], served[checkout][name]))
                for name in ("serving_default", "beam_search")}}
    results.emit(args.output, "The Trainer's export of one model's trained weights per "
                 "checkout, a fresh process per export, checkouts alternating; each export "
                 "loaded in a fresh process and compared on the dev set", figures)


if __name__ == "__main__":
    main()
