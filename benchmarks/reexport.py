"""A trained model's weights exported again by this checkout's export code, so that a change
to the export is measured on the same weights: its translations must not change (`nmt
evaluate` on both) and its decoding speed is compared side by side (`translate_speed.py`).

    PYTHONPATH=. .venv/bin/python -m benchmarks.reexport \\
        --model nmt_runs/Trainer/model/52/Format-Serving \\
        --transform-graph nmt_runs/Transform/transform_graph/51 --out /tmp/reexported \\
        [--profile cpu] [--hparam NAME=VALUE ...] [--decode-rows N]

--profile and --hparam must name the recipe the model was trained with (its shapes must match);
the export's own settings (split_sentences, decode lengths, beam) are this checkout's.
"""
from __future__ import annotations

import argparse
import dataclasses

import tensorflow as tf
import tensorflow_text  # noqa: F401  (the exported graph's tokenizer ops)
import tensorflow_transform as tft

from trainer_module import export, task
from trainer_module.hparams import get_profile, parse_override


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the Trainer's SavedModel")
    parser.add_argument("--transform-graph", required=True, help="the Transform output it used")
    parser.add_argument("--out", required=True)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--hparam", action="append", default=[], type=parse_override)
    parser.add_argument("--decode-rows", type=int, default=export.DECODE_ROWS,
                        help="rows decoded together by length (export.DECODE_ROWS)")
    args = parser.parse_args()
    export.DECODE_ROWS = args.decode_rows
    output = tft.TFTransformOutput(args.transform_graph)
    hparams, model = task.exportable_model(
        dataclasses.replace(get_profile(args.profile), **dict(args.hparam)), output)
    trained = tf.saved_model.load(args.model).model_variables
    if [v.shape for v in trained] != [v.shape for v in model.variables]:
        raise SystemExit(f"{args.model}'s weights do not fit the {args.profile} profile with "
                         f"{args.hparam}: give the recipe it was trained with")
    model.set_weights([v.numpy() for v in trained])
    precision = export.export_translator(model, output, hparams, args.out)
    print(f"Exported {args.model}'s weights to {args.out}, decoding with {precision} weights.")


if __name__ == "__main__":
    main()
