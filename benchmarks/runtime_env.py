"""Train-step time of the same profile under different TensorFlow runtime settings.

Settings that are fixed when TensorFlow starts (kernels, allocator, thread pools) cannot be
compared inside one process as `step_time.py` compares model variants. So each setting runs
`step_time.py` (the profile as is) in a child process with its environment variables, and
the rounds rotate the order of the settings so that the machine's drift hits them alike.
Reports each child's median ms per step and, per round, the ratio to the first setting.

Usage: python benchmarks/runtime_env.py --pipeline-root /work/runs/full [--profile cpu]
           [--precision float32] [--rounds 3] [--steps 10]
           [--setting NAME=VAR=VALUE[,VAR=VALUE...] ...]
Each child starts from `nmt`'s settings (runners/tensorflow_env.py); a setting replaces
some. Without --setting: `nmt`'s (oneDNN kernels), TensorFlow's Eigen kernels, and Eigen with
TensorFlow's pooling (BFC) allocator for CPU tensors instead of malloc.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import results
from benchmarks.step_time import parse_variant

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# `nmt`'s settings (runners/tensorflow_env.py), which every child starts from, first.
DEFAULT_SETTINGS = ["nmt=", "eigen=TF_ENABLE_ONEDNN_OPTS=0",
                    "eigen_bfc=TF_ENABLE_ONEDNN_OPTS=0,TF_CPU_ALLOCATOR_USE_BFC=true"]


def time_one(pipeline_root: str, profile: str, precision: str, steps: int,
             env: dict[str, str]) -> float:
    """Median ms per step of `steps` steps (after tracing) in a fresh process with `env`."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.step_time", "--pipeline-root", pipeline_root,
         "--profile", profile, "--rounds", "1", "--steps", str(steps),
         "--variant", f"run=precision={precision}"],
        env={**os.environ, **env}, cwd=REPO, capture_output=True, text=True, check=True).stdout
    result = json.loads(out[out.index("\n{") + 1:])  # the JSON after the progress lines
    return result["ms_per_step_median"]["run"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--precision", default="float32",
                        help="the precision every setting trains in (step_time.py needs one)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per child process")
    parser.add_argument("--setting", action="append", help="NAME=VAR=VALUE[,VAR=VALUE...]")
    parser.add_argument("--out", help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    settings = dict(parse_variant(s) for s in args.setting or DEFAULT_SETTINGS)
    names = list(settings)
    times: dict[str, list[float]] = {n: [] for n in names}
    started = time.time()
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(time_one(args.pipeline_root, args.profile, args.precision,
                                        args.steps, settings[name]))
        done = round_index + 1
        eta = (time.time() - started) / done * (args.rounds - done)
        print(f"round {done}/{args.rounds} (ETA {eta / 60:.0f} min): " + ", ".join(
            f"{n} {times[n][-1]:.0f} ms" for n in names), flush=True)
    first = names[0]
    ratios = {n: [round(t / f, 3) for t, f in zip(times[n], times[first])] for n in names}
    result = {
        "profile": args.profile, "precision": args.precision, "rounds": args.rounds,
        "steps_per_round": args.steps,
        "settings": settings,
        "ms_per_step_all_rounds": {n: [round(x, 1) for x in t] for n, t in times.items()},
        "step_time_vs_first_per_round": ratios,
        "step_time_vs_first_median": {n: statistics.median(r) for n, r in ratios.items()},
    }
    results.emit(args.out, "training step time under TensorFlow runtime settings (kernels, "
                 "allocator), alternating child processes", result)


if __name__ == "__main__":
    main()
