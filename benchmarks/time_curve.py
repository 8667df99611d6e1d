"""Test BLEU against training time, from the checkpoints of one long Trainer run (issue #10).

Without a cooldown the learning-rate schedule does not depend on the budget, so the checkpoint
a run wrote after N minutes is the model an N-minute run would have exported. Train once
without the cooldown, keeping every checkpoint:

    nmt run --data ../shared/data/fra-eng/fra.txt --pipeline-root ROOT --profile cpu \\
        --to Trainer --train-minutes 120 --hparam cooldown_fraction=0 \\
        --hparam keep_checkpoints=0 --hparam checkpoint_every=250

then, for each budget, the last checkpoint written within it is restored into the run's model
(hparams.json of its ModelRun), exported the way the Trainer exports (float32; the moving
average if the run kept one) and scored on the test split (greedy and, with --beam, beam
search; sacreBLEU, all references):

    python benchmarks/time_curve.py --pipeline-root ROOT --minutes 15 30 60 120 \\
        [--model-run ROOT/Trainer/model_run/N] [--beam]
        [--out time_curve.json]

The history's `train_seconds` (wall seconds of training, validation included, summed over
restarts) gives each checkpoint's time; runs from before it was recorded, or that shared the
CPU with other work, give --seconds-per-step (an idle run's rate) instead.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

from benchmarks import results
from benchmarks.quality import evaluate
from benchmarks.pipeline_outputs import latest


def checkpoint_at(history: list[dict], seconds: float, seconds_per_step: float | None) -> dict:
    """The last history entry (one per checkpoint) written within `seconds` of training
    (0.1 % slack, so that step 1,442 at 1800/1442 s per step counts as within 30 minutes).
    `seconds_per_step`, when given, is the clock instead of the history's train_seconds."""
    def elapsed(entry: dict) -> float:
        if seconds_per_step is not None:
            return entry["step"] * seconds_per_step
        if "train_seconds" not in entry:
            raise SystemExit("this run's history has no train_seconds: pass --seconds-per-step")
        return entry["train_seconds"]

    within = [entry for entry in history if elapsed(entry) <= seconds * 1.001]
    if not within:
        raise SystemExit(f"no checkpoint within {seconds / 60:g} minutes (the first is at step "
                         f"{history[0]['step']}, {elapsed(history[0]) / 60:.1f} minutes)")
    return {**within[-1], "minutes": round(elapsed(within[-1]) / 60, 1)}


def export_checkpoint(model_run: str, checkpoint: str, pipeline_root: str,
                      export_dir: str) -> None:
    """Restores `checkpoint` into the run's model and exports it as the Trainer does."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the NFKC op)
    import tensorflow_transform as tft

    from trainer_module import export
    from trainer_module.hparams import HParams
    from trainer_module.task import build_keras_model

    with open(os.path.join(model_run, "hparams.json")) as f:
        hparams = HParams(**json.load(f))
    if hparams.cooldown_fraction:
        raise SystemExit(
            f"{model_run} decayed its learning rate over its last {hparams.cooldown_fraction:.0%} "
            "of steps, so its earlier checkpoints are not what shorter runs would export: train "
            "the curve's run with --hparam cooldown_fraction=0")
    model = build_keras_model(dataclasses.replace(hparams, use_xla=False))
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(
        checkpoint).assert_existing_objects_matched()
    model.optimizer.finalize_variable_values(model.trainable_variables)  # the average, if kept
    export.export_translator(export.float32_copy(model), tft.TFTransformOutput(
        transform_graph(pipeline_root, model_run)), hparams, export_dir)


def transform_graph(pipeline_root: str, model_run: str) -> str:
    """The Transform output that the Trainer which wrote `model_run` read (ML Metadata)."""
    import ml_metadata as mlmd
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = os.path.join(pipeline_root, "metadata.sqlite")
    store = mlmd.MetadataStore(connection)
    [run] = [a for a in store.get_artifacts_by_type("ModelRun")
             if os.path.normpath(a.uri) == os.path.normpath(model_run)]
    [trainer] = {e.execution_id for e in store.get_events_by_artifact_ids([run.id])
                 if e.type == metadata_store_pb2.Event.OUTPUT}
    inputs = [e.artifact_id for e in store.get_events_by_execution_ids([trainer])
              if e.type == metadata_store_pb2.Event.INPUT]
    [graph] = [a for a in store.get_artifacts_by_id(inputs)
               if a.type_id == store.get_artifact_type("TransformGraph").id]
    return graph.uri


def checkpoint_dir(pipeline_root: str, model_run: str) -> str:
    """The run's checkpoint directory: the one under <root>/checkpoints whose history the
    Trainer copied into `model_run`."""
    with open(os.path.join(model_run, "history.json")) as f:
        history = json.load(f)
    base = os.path.join(pipeline_root, "checkpoints")
    for name in sorted(os.listdir(base)):
        path = os.path.join(base, name, "history.json")
        if os.path.exists(path):
            with open(path) as f:
                if json.load(f) == history:
                    return os.path.dirname(path)
    raise SystemExit(f"no checkpoint directory under {base} has {model_run}'s history")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--minutes", type=float, nargs="+", required=True)
    parser.add_argument("--model-run", help="default: the newest Trainer ModelRun of the root")
    parser.add_argument("--seconds-per-step", type=float,
                        help="time each checkpoint as step x this instead of the history's "
                             "train_seconds: for older runs, and runs that shared the CPU")
    parser.add_argument("--beam", action="store_true", help="also score beam search")
    parser.add_argument("--out", default="time_curve.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    model_run = args.model_run or latest(os.path.join(args.pipeline_root, "Trainer",
                                                      "model_run", "*"))
    checkpoints = checkpoint_dir(args.pipeline_root, model_run)
    with open(os.path.join(checkpoints, "history.json")) as f:
        history = json.load(f)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for number, minutes in enumerate(args.minutes, 1):
            entry = checkpoint_at(history, minutes * 60, args.seconds_per_step)
            checkpoint = os.path.join(checkpoints, f"ckpt-{entry['step']}")
            export_dir = os.path.join(tmp, str(entry["step"]))
            if not os.path.exists(export_dir):
                export_checkpoint(model_run, checkpoint, args.pipeline_root, export_dir)
            row = {"budget_minutes": minutes, "checkpoint": checkpoint, "step": entry["step"],
                   "minutes": entry["minutes"], "val_loss": entry.get("val_loss")}
            for name, signature in (("test", "serving_default"),
                                    *((("test_beam", "beam_search"),) if args.beam else ())):
                scored = evaluate(args.pipeline_root, [export_dir], "test",
                                  signature_name=signature)["models"][export_dir]
                row[name] = {"bleu": scored["overall"]["bleu"],
                             "chrf": scored["overall"]["chrf"],
                             "decode_seconds": scored["decode_seconds"]}
            rows.append(row)
            print(f"[{minutes:g} min] step {entry['step']} ({entry['minutes']} min): test BLEU "
                  f"{row['test']['bleu']:.2f} ({number}/{len(args.minutes)} done)",
                  file=sys.stderr, flush=True)
    results.write(args.out, "test BLEU of every checkpoint of one training against its "
                  "training minutes", {"model_run": model_run, "checkpoints": checkpoints,
                                       "rows": rows})


if __name__ == "__main__":
    main()
