"""Issue #10's ablation: one training change at a time on top of today's default, equal wall time.

Every variant is a real `nmt run --to Trainer` of the `cpu` profile on one pipeline root, so
all share ExampleGen's splits (and, unless the variant changes tokenization, Transform's
output: TFX's cache re-runs only what a variant changes). Each trains for the same
`--train-minutes` (or exactly `--steps`); then its SavedModel translates the eval and test
splits (greedy, and beam search where asked) and sacreBLEU scores them against all references,
overall and on English sentences of more than 10 words. The variant to keep is chosen on the
eval split (printed at the end and stored as "chosen_on_eval"); the test split is reported for
that choice, never used to make it. Run it alone on the machine: the budget is wall time, so
anything else running costs a variant steps.

Usage: python -m benchmarks.experiments.ablation --data ../shared/data/fra-eng/fra.txt \\
           --pipeline-root /work/runs/full (--minutes 10 | --steps 1442 [--step-cost NAME=RATIO]) \\
           [--variant NAME ...] [--beam NAME ...] \\
           [--out docs/benchmarks-history/results/results_ablation.json]
Results are appended per variant as they finish, so a long run can be read (and resumed with
--variant) part way.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.quality import evaluate
from benchmarks.pipeline_outputs import latest

# name -> extra `nmt run` flags on top of the cpu profile's defaults. Results recorded before
# split elisions became the default (results_ablation*.json's "default" rows) were measured on
# top of glued elisions, and their "split_elisions" rows with --split-elisions; before the
# learning-rate cooldown became the default, on top of none. Rows measured with --seconds (the
# old --max-train-seconds) stopped before the cooldown; --minutes budgets complete it.
VARIANTS: dict[str, list[str]] = {
    "default": [],
    "full_shuffle": ["--hparam", "shuffle_pairs=200000"],
    "ema_0.99": ["--hparam", "ema_momentum=0.99"],
    "glued_elisions": ["--no-split-elisions"],  # the default until the 30-minute runs
    "joint_vocab": ["--joint-vocab"],
    "min_count_3": ["--wordpiece-min-count", "3"],
    "no_whole_numbers": ["--no-whole-numbers"],
    "default_seed_1": ["--hparam", "seed=1"],
    "bfloat16": ["--precision", "mixed_bfloat16"],
    # The default since the 1,442-step comparison, whose row (results_ablation_cooldown.json)
    # is named "cooldown_0.2": it was then `--hparam cooldown_fraction=0.2` on top of none.
    "no_cooldown": ["--hparam", "cooldown_fraction=0"],
    # Dropout 0.1 was the default until the 481-step comparison (results_ablation_481_steps.json),
    # whose "no_dropout" row was `--hparam dropout_rate=0` on top of it.
    "dropout_0.1": ["--hparam", "dropout_rate=0.1"],
    # A deep encoder with a shallow decoder (Kasai et al. 2021); cheaper per step, so give it
    # its --step-cost for an equal-time comparison. Its 481-step row had dropout 0.1.
    "enc4_dec1": ["--hparam", "num_layers=4", "--hparam", "num_decoder_layers=1"],
    # 2+2 layers and a peak learning rate of 2.8e-3 (scale 1.0) became the default after the
    # 496-step rows (results_ablation_481_steps.json), which were flags on top of 3+3 layers at
    # 1.4e-3: its "layers_2_lr_scale_1.0" row is today's default, "lr_scale_1.0" is `layers_3`,
    # "layers_2" is `lr_scale_0.5`, "lr_scale_2.0" is `layers_3_lr_scale_2.0`, and
    # `layers_3_lr_scale_0.5` is the old default. 3+3 layers cost 1 / 0.76 of a 2+2 step:
    # --step-cost layers_3=1.32.
    "layers_3": ["--hparam", "num_layers=3"],
    "lr_scale_0.5": ["--hparam", "learning_rate_scale=0.5"],
    "layers_3_lr_scale_0.5": ["--hparam", "num_layers=3", "--hparam", "learning_rate_scale=0.5"],
    "layers_3_lr_scale_2.0": ["--hparam", "num_layers=3", "--hparam", "learning_rate_scale=2.0"],
    # The schedule of the 2+2 default. After the warmup the rate is scale * d_model^-0.5 *
    # step^-0.5 whatever the warmup, so a shorter warmup keeps the same tail and only peaks
    # earlier and higher (4.0e-3 at step 250).
    "cooldown_0.4": ["--hparam", "cooldown_fraction=0.4"],
    "warmup_250": ["--hparam", "warmup_steps=250"],
    "label_smoothing_0": ["--hparam", "label_smoothing=0"],
    # Another profile (the later --profile wins): run it with --steps of its own train_steps.
    "profile_cpu_2h": ["--profile", "cpu_2h"],
}
BEAM_VARIANTS = ("default",)  # beam search costs ~2.4x the decoding time; scored where asked


def steps_for(name: str, args: argparse.Namespace) -> int:
    """--steps, divided by the variant's --step-cost: the same wall time at its speed."""
    return round(args.steps / args.step_cost.get(name, 1.0))


def train(name: str, flags: list[str], args: argparse.Namespace) -> dict:
    os.makedirs(args.pipeline_root, exist_ok=True)
    log_path = os.path.join(args.pipeline_root, f"ablation-{name}.log")
    command = [os.path.join(os.path.dirname(sys.executable), "nmt"), "run", "--data", args.data,
               "--pipeline-root", args.pipeline_root, "--profile", "cpu", "--to", "Trainer",
               *(["--train-steps", str(steps_for(name, args))] if args.steps
                 else ["--train-minutes", str(args.minutes)]), *flags]
    budget = f"{steps_for(name, args)} steps" if args.steps else f"{args.minutes:g} min"
    print(f"[{name}] training for {budget}: {' '.join(command)} (log: {log_path})",
          file=sys.stderr, flush=True)
    start = time.time()
    with open(log_path, "w") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True)
    run_dir = latest(os.path.join(args.pipeline_root, "Trainer", "model_run", "*"))
    with open(os.path.join(run_dir, "history.json")) as f:
        history = json.load(f)
    return {"flags": flags, "model": os.path.join(latest(os.path.join(
                args.pipeline_root, "Trainer", "model", "*")), "Format-Serving"),
            "steps": history[-1]["step"],
            "final": history[-1], "pipeline_seconds": round(time.time() - start, 1)}


def score(row: dict, pipeline_root: str, beam: bool) -> None:
    """Adds eval and test BLEU/chrF (greedy; test with beam search too if `beam`) and the
    decoding time of row["model"] to the row."""
    for split, signature in (("eval", "serving_default"), ("test", "serving_default"),
                             *((("test_beam", "beam_search"),) if beam else ())):
        scored = evaluate(pipeline_root, [row["model"]], split.removesuffix("_beam"),
                          signature_name=signature)["models"][row["model"]]
        row[split] = {"bleu": scored["overall"]["bleu"], "chrf": scored["overall"]["chrf"],
                      "sentences": scored["overall"]["sentences"],
                      "over_10_words_bleu": scored["over_10_words"]["bleu"],
                      "decode_seconds": scored["decode_seconds"]}
    row["signatures"] = {"bleu": scored["overall"]["bleu_signature"],
                         "chrf": scored["overall"]["chrf_signature"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--minutes", type=float, default=10.0, help="the training time budget")
    parser.add_argument("--steps", type=int, default=0,
                        help="train exactly this many steps instead of --minutes: for variants "
                        "that cost the same per step (the learning-rate schedule), the steps a "
                        "time budget reached are that budget, without the machine's noise")
    parser.add_argument("--step-cost", action="append", default=[], metavar="NAME=RATIO",
                        help="with --steps: the variant's time per step over the default's "
                        "(benchmarks/step_time.py); it trains steps / RATIO steps")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS),
                        help="run only these (default: all, in the table's order)")
    parser.add_argument("--beam", action="append", choices=sorted(VARIANTS),
                        help="also score these with beam search (default: "
                        f"{', '.join(BEAM_VARIANTS)})")
    parser.add_argument("--out", default="docs/benchmarks-history/results/results_ablation.json")
    args = parser.parse_args()
    args.step_cost = {name: float(ratio) for name, _, ratio in
                      (item.partition("=") for item in args.step_cost)}
    results = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    names = args.variant or list(VARIANTS)
    for number, name in enumerate(names, 1):
        began = time.time()
        row = train(name, VARIANTS[name], args)
        if args.steps:
            row["steps_budget"] = steps_for(name, args)
            row["step_cost"] = args.step_cost.get(name, 1.0)
        else:
            row["minutes_budget"] = args.minutes
        score(row, args.pipeline_root, beam=name in (args.beam or BEAM_VARIANTS))
        results[name] = row
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)
        left = (time.time() - began) * (len(names) - number)
        print(f"[{name}] {row['steps']} steps; test BLEU {row['test']['bleu']:.2f}, "
              f"eval BLEU {row['eval']['bleu']:.2f} ({number}/{len(names)} done, "
              f"ETA {left / 60:.0f} min)", file=sys.stderr, flush=True)
    chosen = max(names, key=lambda n: results[n]["eval"]["bleu"])
    results["chosen_on_eval"] = {"variant": chosen, "among": names,
                                 "eval_bleu": results[chosen]["eval"]["bleu"],
                                 "test_bleu": results[chosen]["test"]["bleu"]}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=2)
    print(f"Chosen on the eval split: {chosen} (eval BLEU {results[chosen]['eval']['bleu']:.2f}"
          f"; reported on test: {results[chosen]['test']['bleu']:.2f})", file=sys.stderr)


if __name__ == "__main__":
    main()
