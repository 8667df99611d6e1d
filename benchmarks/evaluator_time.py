"""The Evaluator's time (issue #67): TFX's Evaluator as `make run` runs it (the pipeline's
eval_config, the DirectRunner in memory on one worker, the imports frozen out of the garbage
collector's passes as `nmt run` freezes them), on one ExampleGen output's eval split,
once per model in alternating rounds, through LocalDagRunner. A model is a directory that
holds `Format-Serving/`, as a Trainer's Model artifact does (`benchmarks/reexport.py --out
DIR/Format-Serving` exports trained weights with this checkout's code, or another's).
With `--checkout`, each checkout's own Evaluator code (its metrics and eval_config) runs
each model, in a process of its own, checkouts and models alternating in every round; with
`--pair CHECKOUT=MODEL` (repeatable) instead, each checkout runs only its own model (each
commit's code with its own export).

    PYTHONPATH=. .venv/bin/python -m benchmarks.evaluator_time \\
        --examples RUN/FraTxtExampleGen/examples/N --model DIR_A [--model DIR_B] \\
        [--checkout DIR_1 --checkout DIR_2] [--rounds 2] [--output evaluator_time.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

from tfx.dsl.components.common.importer import Importer
from tfx.orchestration import metadata as tfx_metadata
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from tfx.orchestration.pipeline import Pipeline
from tfx.types import standard_artifacts

from benchmarks import results
from metadata import artifacts
from pipeline.config import DEFAULT_BEAM_ARGS
from pipeline.eval_config import make_evaluator
from runners import interpreter, local_runner


def evaluator_seconds(examples_uri: str, model_uri: str, root: str) -> tuple[float, dict]:
    """One Evaluator run of the model on the eval split: its wall time (the importers'
    fraction of a second included) and its metrics."""
    splits = sorted(os.path.basename(p).removeprefix("Split-")
                    for p in glob.glob(os.path.join(examples_uri, "Split-*")))
    examples = Importer(source_uri=examples_uri, artifact_type=standard_artifacts.Examples,
                        properties={"split_names": json.dumps(splits)}).with_id("examples")
    model = Importer(source_uri=model_uri, artifact_type=standard_artifacts.Model
                     ).with_id("model")
    evaluator = make_evaluator(examples.outputs["result"], model.outputs["result"], None,
                               min_bleu=0.0, max_drop=100.0)
    pipeline = Pipeline(
        pipeline_name="evaluator-time", pipeline_root=root,
        components=[examples, model, evaluator], enable_cache=False,
        metadata_connection_config=tfx_metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")),
        beam_pipeline_args=list(DEFAULT_BEAM_ARGS))
    interpreter.freeze_imports()  # as runners/local_runner.py before the pipeline runs
    local_runner.without_tfx_package()  # as nmt run: no sdist of TFX before the Evaluator
    start = time.perf_counter()
    LocalDagRunner().run(pipeline)
    seconds = time.perf_counter() - start
    evaluation = glob.glob(os.path.join(root, "Evaluator", "evaluation", "*"))[0]
    return seconds, artifacts.evaluation_metrics(evaluation)


def checkout_seconds(checkout: str, examples_uri: str, model_uri: str) -> tuple[float, dict]:
    """evaluator_seconds with another checkout's code, in a process of its own."""
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "one.json")
        subprocess.run([sys.executable, "-m", "benchmarks.evaluator_time", "--examples",
                        examples_uri, "--model", model_uri, "--rounds", "1", "--output",
                        output], cwd=checkout, env={**os.environ, "PYTHONPATH": checkout},
                       stdout=subprocess.DEVNULL, check=True)
        with open(output, encoding="utf-8") as f:
            figures = json.load(f)["figures"]["models"][model_uri]
    return figures["seconds"][0], figures["metrics"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", required=True, help="an ExampleGen output directory")
    parser.add_argument("--model", action="append", default=[],
                        help="a directory holding Format-Serving/ (repeat to compare models)")
    parser.add_argument("--checkout", action="append", default=[],
                        help="a checkout whose Evaluator code runs the models (repeat to "
                        "compare code; default: this one, in this process)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default="evaluator_time.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    parser.add_argument("--pair", action="append", default=[], metavar="CHECKOUT=MODEL",
                        help="a checkout and the one model its code runs (instead of "
                        "--checkout and --model)")
    args = parser.parse_args()
    if not (args.pair or args.model):
        parser.error("give --model (with --checkout, or none) or --pair")
    variants = [tuple(pair.split("=", 1)) for pair in args.pair] or [
        (checkout, model) for checkout in args.checkout or [None] for model in args.model]

    def label(checkout: str | None, model: str) -> str:
        return model if checkout is None else f"{results.commit(checkout)} {model}"

    seconds = {variant: [] for variant in variants}
    metrics = {}
    for _ in range(args.rounds):  # alternating: every variant once per round
        for checkout, model in variants:
            if checkout is None:
                with tempfile.TemporaryDirectory() as root:
                    took, metrics[checkout, model] = evaluator_seconds(args.examples, model,
                                                                       root)
            else:
                took, metrics[checkout, model] = checkout_seconds(checkout, args.examples,
                                                                  model)
            seconds[checkout, model].append(round(took, 1))
    results.emit(args.output, "TFX's Evaluator on the eval split, as make run runs it, per "
                 "model (and checkout) in alternating rounds", {
                     "examples": args.examples, "rounds": args.rounds,
                     "models": {label(*variant): {"seconds": seconds[variant],
                                                  "metrics": metrics[variant]}
                                for variant in variants}})


if __name__ == "__main__":
    main()
