"""The Evaluator's time (issue #67): TFX's Evaluator as `make run` runs it (the pipeline's
eval_config, the DirectRunner in memory on one worker), on one ExampleGen output's eval split,
once per model in alternating rounds, through LocalDagRunner. A model is a directory that
holds `Format-Serving/`, as a Trainer's Model artifact does (`benchmarks/reexport.py --out
DIR/Format-Serving` exports trained weights with this checkout's code, or another's).

    PYTHONPATH=. .venv/bin/python -m benchmarks.evaluator_time \\
        --examples RUN/FraTxtExampleGen/examples/N --model DIR_A --model DIR_B \\
        [--rounds 2] [--output evaluator_time.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import tempfile
import time

from tfx.components import Evaluator
from tfx.dsl.components.common.importer import Importer
from tfx.orchestration import metadata as tfx_metadata
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from tfx.orchestration.pipeline import Pipeline
from tfx.types import standard_artifacts

from benchmarks import results
from metadata import artifacts
from pipeline.config import DEFAULT_BEAM_ARGS
from pipeline.eval_config import make_eval_config


def evaluator_seconds(examples_uri: str, model_uri: str, root: str) -> tuple[float, dict]:
    """One Evaluator run of the model on the eval split: its wall time (the importers'
    fraction of a second included) and its metrics."""
    splits = sorted(os.path.basename(p).removeprefix("Split-")
                    for p in glob.glob(os.path.join(examples_uri, "Split-*")))
    examples = Importer(source_uri=examples_uri, artifact_type=standard_artifacts.Examples,
                        properties={"split_names": json.dumps(splits)}).with_id("examples")
    model = Importer(source_uri=model_uri, artifact_type=standard_artifacts.Model
                     ).with_id("model")
    evaluator = Evaluator(examples=examples.outputs["result"], model=model.outputs["result"],
                          eval_config=make_eval_config(0.0, 100.0))
    pipeline = Pipeline(
        pipeline_name="evaluator-time", pipeline_root=root,
        components=[examples, model, evaluator], enable_cache=False,
        metadata_connection_config=tfx_metadata.sqlite_metadata_connection_config(
            os.path.join(root, "metadata.sqlite")),
        beam_pipeline_args=list(DEFAULT_BEAM_ARGS))
    start = time.perf_counter()
    LocalDagRunner().run(pipeline)
    seconds = time.perf_counter() - start
    evaluation = glob.glob(os.path.join(root, "Evaluator", "evaluation", "*"))[0]
    return seconds, artifacts.evaluation_metrics(evaluation)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", required=True, help="an ExampleGen output directory")
    parser.add_argument("--model", required=True, action="append",
                        help="a directory holding Format-Serving/ (repeat to compare models)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--output", default="evaluator_time.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    seconds = {model: [] for model in args.model}
    metrics = {}
    for _ in range(args.rounds):  # alternating: every model once per round
        for model in args.model:
            with tempfile.TemporaryDirectory() as root:
                took, metrics[model] = evaluator_seconds(args.examples, model, root)
            seconds[model].append(round(took, 1))
    results.emit(args.output, "TFX's Evaluator on the eval split, as make run runs it, per "
                 "model in alternating rounds", {
                     "examples": args.examples, "rounds": args.rounds,
                     "models": {model: {"seconds": seconds[model], "metrics": metrics[model]}
                                for model in args.model}})


if __name__ == "__main__":
    main()
