"""Time of the Trainer's SavedModel export, and of loading it, with the Keras model tracked by
the exported module or only its variables (what `export.Translator` does).

A tracked Keras model makes tf.saved_model.save trace every layer's call for Keras' own
loader; the translator is served through its signatures only, so those traces are dead weight.
Per profile, after one untimed export, both variants export an untrained float32 model (the
same graph as a trained one) in alternating order, `--rounds` times, each with fresh tracing;
then each variant's export is loaded and translates one sentence in a fresh process.

    PYTHONPATH=. .venv/bin/python benchmarks/experiments/export_time.py --pipeline-root nmt_runs \\
        --profiles smoke,cpu --rounds 3 --out benchmarks/results/results_export_time.json
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import tensorflow as tf
import tensorflow_transform as tft

from benchmarks.scale import machine_info
from trainer_module import export, task
from trainer_module.hparams import get_profile

VARIANTS = ("variables", "keras_model")
_LOAD = ("import sys, time; t = time.monotonic(); import tensorflow as tf, tensorflow_text; "
         "m = tf.saved_model.load(sys.argv[1]); s = time.monotonic(); "
         "m.signatures['serving_default'](english=tf.constant(['Go.'])); "
         "print(s - t, time.monotonic() - s)")


def export_once(model, output: tft.TFTransformOutput, hparams, variant: str, path: str) -> float:
    """Seconds to build, trace and save one translator."""
    started = time.monotonic()
    translator = export.Translator(model, output, hparams)
    if variant == "keras_model":
        translator.keras_model = model  # tracked: Keras adds its layer traces
    tf.saved_model.save(translator, path, signatures=export.signatures(translator))
    return time.monotonic() - started


def load_once(path: str) -> tuple[float, float]:
    """(load seconds, first translation seconds) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _LOAD, path], capture_output=True, text=True,
                         check=True).stdout.split()
    return float(out[0]), float(out[1])


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline-root", required=True, help="a root with a Transform output")
    parser.add_argument("--profiles", default="smoke,cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    graph = sorted(glob.glob(os.path.join(args.pipeline_root, "Transform", "transform_graph",
                                          "*")))[-1]
    output = tft.TFTransformOutput(graph)
    results = {"machine": machine_info(), "rounds": args.rounds, "profiles": {}}
    for profile in args.profiles.split(","):
        hparams, model = task.exportable_model(get_profile(profile), output)
        times = {variant: [] for variant in VARIANTS}
        rows = {}
        with tempfile.TemporaryDirectory() as scratch:
            # Untimed: the process's first export also pays one-time costs (13.7 s against
            # 4.7 s for the same variant in a trial run).
            export_once(model, output, hparams, VARIANTS[0], os.path.join(scratch, "warm-up"))
            for round_ in range(args.rounds):
                order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    path = os.path.join(scratch, f"{variant}-{round_}")
                    times[variant].append(export_once(model, output, hparams, variant, path))
                    print(f"{profile} round {round_ + 1}/{args.rounds} {variant}: "
                          f"{times[variant][-1]:.1f} s", file=sys.stderr)
            for variant in VARIANTS:
                path = os.path.join(scratch, f"{variant}-0")
                load_s, first_s = load_once(path)
                rows[variant] = {"export_s": [round(t, 2) for t in times[variant]],
                                 "export_median_s": round(statistics.median(times[variant]), 2),
                                 "load_s": round(load_s, 2), "first_translation_s":
                                 round(first_s, 2), "bytes": directory_bytes(path)}
        rows["keras_model_over_variables"] = round(
            rows["keras_model"]["export_median_s"] / rows["variables"]["export_median_s"], 2)
        results["profiles"][profile] = rows
        print(json.dumps({profile: rows}), file=sys.stderr)
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
