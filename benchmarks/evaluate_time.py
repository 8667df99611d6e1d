"""`nmt evaluate` as a user runs it after `nmt run` (issue #67): the newest model pushed under a
pipeline root, scored on a test set with the training-overlap check (the model's train split,
found through its ML Metadata lineage, read back), timed from the command's start to its exit.
Each checkout's own `nmt` runs in a process of its own, the checkouts alternating in every
round. A checkout given as CHECKOUT=EXPORT runs with EXPORT (the same weights exported by its
own code: `reexport.py`) in the pushed model's directory, put back afterwards, so that each
commit's code decodes its own export and its overlap check still finds the pushed model's
lineage.

    PYTHONPATH=. .venv/bin/python -m benchmarks.evaluate_time --pipeline-root RUN \\
        --source X.eng --reference X.fra --checkout DIR[=EXPORT] [--checkout ...] \\
        [--rounds 2] [--output evaluate_time.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Iterator

from benchmarks import results
from inference.translate import resolve_model_dir
from pipeline.config import PIPELINE_NAME
from runners import tensorflow_env


@contextlib.contextmanager
def exported_as_pushed(pushed: str, export: str | None) -> Iterator[None]:
    """`export`'s files in the pushed model's directory `pushed` for the duration, the pushed
    files put back afterwards (nothing changes for None)."""
    if export is None:
        yield
        return
    aside = pushed + ".pushed"
    os.rename(pushed, aside)
    try:
        shutil.copytree(export, pushed)
        yield
    finally:
        shutil.rmtree(pushed, ignore_errors=True)
        os.rename(aside, pushed)


def evaluate_seconds(checkout: str, pipeline_root: str, source: str, reference: str
                     ) -> tuple[float, dict]:
    """One `nmt evaluate` by the checkout's code: its wall time and its --json result."""
    # Without the TensorFlow settings this process took from `nmt`'s defaults: the checkout's
    # `nmt` sets its own, as in a user's shell.
    env = {name: value for name, value in os.environ.items()
           if name not in tensorflow_env.DEFAULTS}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cli", "evaluate", "--pipeline-root",
                           pipeline_root, "--source", source, "--reference", reference,
                           "--json"], cwd=checkout, env={**env, "PYTHONPATH": checkout},
                          check=True, capture_output=True, text=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline-root", required=True, help="an `nmt run`'s pipeline root")
    parser.add_argument("--source", required=True, help="the test set's English lines")
    parser.add_argument("--reference", required=True, help="its French references")
    parser.add_argument("--checkout", action="append", required=True,
                        metavar="CHECKOUT[=EXPORT]",
                        help="a checkout whose `nmt evaluate` runs (repeat to compare), and "
                        "the export it decodes instead of the pushed model's files")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default="evaluate_time.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    pushed = resolve_model_dir(os.path.join(args.pipeline_root, "serving", PIPELINE_NAME))
    variants = [(*checkout.split("=", 1), None)[:2] for checkout in args.checkout]
    # By checkout and export: one checkout may run two exports.
    seconds: dict[tuple[str, str | None], list[float]] = {}
    outputs: dict[tuple[str, str | None], dict] = {}
    for _ in range(args.rounds):  # alternating: every checkout once per round
        for variant in variants:
            with exported_as_pushed(pushed, variant[1]):
                took, outputs[variant] = evaluate_seconds(
                    variant[0], args.pipeline_root, args.source, args.reference)
            seconds.setdefault(variant, []).append(round(took, 1))
    results.emit(args.output, "`nmt evaluate` as a user runs it after `nmt run` (the newest "
                 "pushed model, the training-overlap check), wall seconds per checkout in "
                 "alternating rounds", {
                     "pipeline_root": args.pipeline_root, "source": args.source,
                     "rounds": args.rounds,
                     "checkouts": {
                         " ".join((results.commit(checkout), *([export] if export else []))): {
                             "export": export, "seconds": seconds[checkout, export],
                             "sentences_per_second":
                                 outputs[checkout, export]["sentences_per_second"],
                             "bleu": outputs[checkout, export]["scores"]["all"]["bleu"],
                             "chrf": outputs[checkout, export]["scores"]["all"]["chrf"],
                             "overlap": outputs[checkout, export]["overlap"]}
                         for checkout, export in variants}})


if __name__ == "__main__":
    main()
