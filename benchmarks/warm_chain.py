"""Does a schedule of warm-started runs lose anything, and what does each run add? Chains of
`nmt run --warm-start` against runs from scratch, scored on the dev set (issue #65).

    PYTHONPATH=. .venv/bin/python -m benchmarks.warm_chain --data $FRA_TXT \\
        --dev ../shared/data/tatoeba-dev/tatoeba-test-v2021-08-07.unseen \\
        --work /work/chain --output warm_chain_avx2.json [--arm chain_3x10 --arm chain_2x30]

Arms (`--unit` minutes, 10 by default; each arm its own pipeline root under --work):
  chain_3x10          three runs of 1 unit, each warm-started from the one before (from its
                      training state before the cooldown; before 6497868, from its served
                      weights: the commit column tells them apart)
  chain_3x10_served   the same with `--hparam continued_from=served`: each continued run
                      starts from the served weights with empty optimizer moments (and the
                      total tail, the default since 5df4f86: compare with
                      chain_3x10_total_tail)
  chain_3x10_reseeded the same, each continued run drawing its own order of the training
                      pairs (its seed moved on by the steps behind it, the default from this
                      arm on), where chain_3x10 and chain_3x10_total_tail replayed their
                      first run's
  chain_3x10_reseeded_seed_1  the same with `--hparam seed=1` in every run: a second chain,
                      whose first run reads the pairs in fresh_30_seed_1's order
  fresh_30            one run of 3 units from scratch (chain_2x30's first run, alone)
  fresh_30_seed_1     the same with `--hparam seed=1` (another order of the training pairs;
                      the initialization is random in every run). Its budget chooses its size
                      anew: where the probe finds a deeper model affordable, it trains that
                      (the model column), and fresh_30 against it is no longer the noise of
                      training alone
  chain_3x10_restart  the same with `--hparam continued_schedule=restart`: each continued run
                      warms up to the peak again, as a fresh run does (the learning-rate choice)
  chain_3x10_total_tail  the same with `--hparam continued_tail=total` (the default since
                      this arm's second measurement): each continued run's cooldown and weight
                      average span their fractions of all the steps behind it, as one long
                      run's would (the last run's tail)
  chain_2x30          two runs of 3 units; its first run is "fresh 30", the second continues it
  chain_3x_steps      three runs of a third of "fresh 30"'s steps each (`--train-steps`, no
                      budget), each warm-started from the one before: the chain's schedule
                      alone, without the minutes each run of a time-budgeted chain spends
                      starting, exporting and evaluating (needs chain_2x30's first run)
  fresh_60            one run of 6 units from scratch
  spans               fra.txt cut into two spans by a hash of the English sentence: a run of 1
                      unit on span 1, then one of 1 unit warm-started on span 2 alone, against
                      a run of 2 units from scratch on both spans (`--spans 2`)
  spans_two           as spans, but the warm-started run reads the newest two spans
                      (`--spans 2`): span 2 and span 1, which its base model trained on
Every run is the product's `nmt run --warm-start --train-minutes M` (the first of a chain
finds nothing served and trains from scratch), with `--min-bleu 0`: the chain measures
training, and a short run below the cpu profile's gate would push nothing to continue. Each
run's pushed model is decoded greedily on the dev set as `nmt translate` does, and the
comparisons are paired bootstraps (`paired.py`). A finished run is kept in its arm's
`state.json` and not run again, so arms can be added later; a comparison whose two arms ran
on different machines is left out. Alone on the machine, from a worktree of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zlib

from benchmarks import results
from benchmarks.gap import bleu_statistics
from benchmarks.paired import paired_bootstrap, read_lines

SERVING = os.path.join("serving", "nmt-fra-eng")
ARMS = ("chain_3x10", "chain_2x30", "chain_3x10_restart", "chain_3x10_total_tail", "fresh_60",
        "spans", "chain_3x_steps", "spans_two", "chain_3x10_served", "fresh_30",
        "chain_3x10_reseeded", "fresh_30_seed_1", "chain_3x10_reseeded_seed_1")
# (arm, run index) pairs compared: candidate against baseline.
COMPARISONS = (
    ("chain of 3 x 1 unit against 3 units from scratch", ("chain_3x10", 2), ("chain_2x30", 0)),
    ("chain of 3 x 1 unit against 3 units from scratch (fresh_30)", ("chain_3x10", 2),
     ("fresh_30", 0)),
    ("chain of 3 x 1 unit from the served weights against 3 units from scratch",
     ("chain_3x10_served", 2), ("fresh_30", 0)),
    ("chain of 3 x 1 unit, total tails, from the training state against the served weights",
     ("chain_3x10_total_tail", 2), ("chain_3x10_served", 2)),
    ("chain of 3 x 1 unit, its tails sized by all the steps behind, against 3 units from "
     "scratch (fresh_30)", ("chain_3x10_total_tail", 2), ("fresh_30", 0)),
    ("chain of 3 x 1 unit, each run its own data order, against 3 units from scratch "
     "(fresh_30)", ("chain_3x10_reseeded", 2), ("fresh_30", 0)),
    ("chain of 3 x 1 unit, each run its own data order, seed 1, against 3 units from "
     "scratch (fresh_30)", ("chain_3x10_reseeded_seed_1", 2), ("fresh_30", 0)),
    ("chain of 3 x 1 unit, each run its own data order, against the chain replaying its "
     "first run's", ("chain_3x10_reseeded", 2), ("chain_3x10_total_tail", 2)),
    ("3 units from scratch, seed 1, at the size its budget chose, against fresh_30",
     ("fresh_30_seed_1", 0), ("fresh_30", 0)),
    ("chain of 3 x 1 unit, each run its own data order, against 3 units from scratch, "
     "seed 1, at the size its budget chose", ("chain_3x10_reseeded", 2), ("fresh_30_seed_1", 0)),
    ("chain of 3 x 1 unit, each run its own data order, seed 1, against 3 units from "
     "scratch, seed 1, at the size its budget chose", ("chain_3x10_reseeded_seed_1", 2),
     ("fresh_30_seed_1", 0)),
    ("chain of 2 x 3 units against 3 units from scratch", ("chain_2x30", 1), ("chain_2x30", 0)),
    ("chain of 2 x 3 units against 6 units from scratch", ("chain_2x30", 1), ("fresh_60", 0)),
    ("chain of 3 x 1 unit warming up again, against the continued schedule",
     ("chain_3x10_restart", 2), ("chain_3x10", 2)),
    ("chain of 3 x 1 unit, its tails sized by all the steps behind, against the run's own",
     ("chain_3x10_total_tail", 2), ("chain_3x10", 2)),
    ("chain of 3 x 1 unit, its tails sized by all the steps behind, against 3 units from "
     "scratch", ("chain_3x10_total_tail", 2), ("chain_2x30", 0)),
    ("1 unit on span 1 then 1 warm on span 2, against 2 units from scratch on both",
     ("spans", 1), ("spans", 2)),
    ("chain of 3 runs of a third of its steps each, against 3 units from scratch",
     ("chain_3x_steps", 2), ("chain_2x30", 0)),
    ("1 unit on span 1 then 1 warm on both spans, against 2 units from scratch on both",
     ("spans_two", 1), ("spans", 2)),
    ("1 unit on span 1 then 1 warm on both spans, against 1 warm on span 2 alone",
     ("spans_two", 1), ("spans", 1)),
)


def runs_of(arm: str, unit: float, work: str) -> list[dict]:
    """The runs of an arm, in order: minutes, data, extra flags, pipeline root."""
    root = os.path.join(work, arm)
    if arm in ("chain_3x10", "chain_3x10_reseeded"):  # the code's defaults: the commit differs
        return [{"minutes": unit, "root": root}] * 3
    if arm == "chain_3x10_restart":
        return [{"minutes": unit, "root": root,
                 "flags": ["--hparam", "continued_schedule=restart"]}] * 3
    if arm == "chain_3x10_total_tail":
        return [{"minutes": unit, "root": root,
                 "flags": ["--hparam", "continued_tail=total"]}] * 3
    if arm == "chain_2x30":
        return [{"minutes": 3 * unit, "root": root}] * 2
    if arm == "chain_3x10_served":
        return [{"minutes": unit, "root": root,
                 "flags": ["--hparam", "continued_from=served"]}] * 3
    if arm == "chain_3x10_reseeded_seed_1":
        return [{"minutes": unit, "root": root, "flags": ["--hparam", "seed=1"]}] * 3
    if arm == "fresh_30":
        return [{"minutes": 3 * unit, "root": root}]
    if arm == "fresh_30_seed_1":
        return [{"minutes": 3 * unit, "root": root, "flags": ["--hparam", "seed=1"]}]
    if arm == "fresh_60":
        return [{"minutes": 6 * unit, "root": root}]
    if arm == "chain_3x_steps":
        with open(os.path.join(work, "chain_2x30.json"), encoding="utf-8") as f:
            fresh = json.load(f)["runs"][0]["train_steps"]
        return [{"steps": round(fresh / 3), "root": root}] * 3
    spans = os.path.join(work, "spans_data", "fra-{SPAN}.txt")
    if arm == "spans_two":  # its own span files: the first run must find span 1 alone
        spans = os.path.join(work, "spans_two_data", "fra-{SPAN}.txt")
        return [{"minutes": unit, "root": root, "data": spans, "spans_present": 1},
                {"minutes": unit, "root": root, "data": spans, "spans_present": 2,
                 "flags": ["--spans", "2"]}]
    return [{"minutes": unit, "root": root, "data": spans, "spans_present": 1},
            {"minutes": unit, "root": root, "data": spans, "spans_present": 2},
            {"minutes": 2 * unit, "root": root + "_both", "data": spans, "spans_present": 2,
             "flags": ["--spans", "2"]}]


def write_spans(fra_txt: str, directory: str, present: int) -> None:
    """fra.txt's lines as span files 1..present, the span of a line chosen by a hash of its
    English sentence (all references of a sentence in one span)."""
    os.makedirs(directory, exist_ok=True)
    with open(fra_txt, encoding="utf-8", newline="") as f:
        lines = f.readlines()
    for span in range(1, present + 1):
        path = os.path.join(directory, f"fra-{span}.txt")
        if not os.path.exists(path):
            with open(path + ".tmp", "w", encoding="utf-8", newline="") as out:
                out.writelines(line for line in lines if
                               zlib.crc32(line.split("\t", 1)[0].encode("utf-8")) % 2 == span - 1)
            os.replace(path + ".tmp", path)


def newest_version(root: str) -> str | None:
    """The newest complete pushed version of a pipeline root, None before the first."""
    from components.serving_versions import pushed_versions  # TFX: only when training

    serving = os.path.join(root, SERVING)
    versions = pushed_versions(serving)
    return os.path.join(serving, str(versions[-1])) if versions else None


def run_length(run: dict) -> tuple[list[str], str]:
    """A run's length as `nmt run` flags, and in words: a step count or a time budget."""
    if "steps" in run:
        return ["--train-steps", str(run["steps"])], f"{run['steps']:,} steps"
    return ["--train-minutes", f"{run['minutes']:g}"], f"{run['minutes']:g} minutes"


def train(run: dict, fra_txt: str) -> dict:
    """One `nmt run`; returns the pushed model's path, wall minutes and training record."""
    from trainer_module.warm_start import read_record  # TensorFlow: only when training
    data = run.get("data", fra_txt)
    if "spans_present" in run:
        write_spans(fra_txt, os.path.dirname(run["data"]), run["spans_present"])
    before = newest_version(run["root"])
    command = [os.path.join(os.path.dirname(sys.executable), "nmt"), "run", "--data", data,
               "--pipeline-root", run["root"], "--warm-start", *run_length(run)[0],
               "--min-bleu", "0",
               *run.get("flags", [])]
    print("$ " + " ".join(command), flush=True)
    started = time.monotonic()
    subprocess.run(command, check=True)
    model = newest_version(run["root"])
    if model is None or model == before:
        raise SystemExit(f"{' '.join(command)} pushed no model: see its log above.")
    record = read_record(model)
    return {"model": model, "run_minutes": round((time.monotonic() - started) / 60, 2),
            "train_steps": record.train_steps, "total_train_steps": record.total_train_steps,
            "schedule_steps": record.schedule_steps,
            "continued_from": record.hparams.get("continued_from", "served"),
            "model_shape": {k: record.hparams[k] for k in ("num_layers", "d_model", "dff")}}


def dev_scores(model: str, sources: list[str], references: list[str]) -> dict:
    """Greedy dev-set BLEU/chrF as `nmt translate` decodes, and the hypotheses."""
    from inference import evaluate as evaluate_lib, translate as translate_lib
    hypotheses = translate_lib.translate(sources, model, None)
    scores = evaluate_lib.score(hypotheses, [references])
    return {"dev_bleu": scores["bleu"], "dev_chrf": scores["chrf"], "hypotheses": hypotheses}


def run_arm(arm: str, args: argparse.Namespace, sources: list[str],
            references: list[str]) -> dict:
    """Runs what the arm's state.json lacks; returns the state."""
    path = os.path.join(args.work, arm + ".json")
    state = {"runs": []}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    planned = runs_of(arm, args.unit, args.work)
    for index in range(len(state["runs"]), len(planned)):
        run = planned[index]
        print(f"{arm}: run {index + 1} of {len(planned)}, {run_length(run)[1]}", flush=True)
        done = {"minutes": run.get("minutes"), **train(run, args.data),
                "machine": results.machine(), "commit": results.commit()}
        done.update(dev_scores(done["model"], sources, references))
        print(f"{arm}: run {index + 1}: {done['train_steps']:,} steps "
              f"({done['total_train_steps']:,} in all), dev BLEU {done['dev_bleu']:.2f}",
              flush=True)
        state["runs"].append(done)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(state, f, ensure_ascii=False, indent=1)
        os.replace(path + ".tmp", path)
    return state


def compare(arms: dict[str, dict], references: list[str]) -> list[dict]:
    """The paired bootstraps of COMPARISONS whose runs exist and ran on one machine."""
    rows = []
    for name, (arm_a, run_a), (arm_b, run_b) in COMPARISONS:
        try:
            candidate, baseline = arms[arm_a]["runs"][run_a], arms[arm_b]["runs"][run_b]
        except (KeyError, IndexError):
            continue
        if candidate["machine"] != baseline["machine"]:
            continue
        refs = [[r] for r in references]
        rows.append({"comparison": name, "candidate": f"{arm_a} run {run_a + 1}",
                     "baseline": f"{arm_b} run {run_b + 1}",
                     **paired_bootstrap(bleu_statistics(baseline["hypotheses"], refs),
                                        bleu_statistics(candidate["hypotheses"], refs))})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="fra.txt")
    parser.add_argument("--dev", required=True, help="the dev set's path without .eng/.fra")
    parser.add_argument("--work", required=True, help="pipeline roots and per-arm state")
    parser.add_argument("--arm", action="append", choices=ARMS,
                        help="run this arm (repeatable; default: all, in the order listed)")
    parser.add_argument("--unit", type=float, default=10.0, help="minutes of the shortest run")
    parser.add_argument("--output", required=True, help="result file (a bare name: in "
                                                        "benchmarks/results/)")
    args = parser.parse_args(argv)
    sources, references = read_lines(args.dev + ".eng"), read_lines(args.dev + ".fra")
    os.makedirs(args.work, exist_ok=True)
    for arm in args.arm or ARMS:
        run_arm(arm, args, sources, references)
    arms = {}
    for arm in ARMS:  # every arm measured so far, this sitting's or an earlier one's
        path = os.path.join(args.work, arm + ".json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                arms[arm] = json.load(f)
    comparisons = compare(arms, references)
    for arm in arms.values():
        for run in arm["runs"]:
            run.pop("hypotheses")
    results.write(args.output, "chains of warm-started `nmt run --warm-start` runs against "
                  "runs from scratch (cpu profile, time budgets in minutes): each run's steps "
                  "and greedy dev-set BLEU/chrF, and paired bootstraps of the chains' last "
                  "models against the runs from scratch",
                  {"unit_minutes": args.unit, "dev": args.dev, "arms": arms,
                   "comparisons": comparisons})


if __name__ == "__main__":
    main()
