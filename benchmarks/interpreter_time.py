"""What `nmt`'s interpreter housekeeping (runners/interpreter.py) saves: the same commands
with it and with the interpreter's defaults (no frozen imports, the full teardown at exit),
in alternating rounds, each in a fresh process.

Usage: python -m benchmarks.interpreter_time --data ../shared/data/fra-eng/fra.txt
           [--rounds 3] [--output interpreter_time.json]
The commands: the smoke pipeline (`nmt run --profile smoke`) on every 50th line of the data,
then `nmt translate` of one sentence with the model it pushed. Per command and variant: wall
seconds, CPU seconds (user + system) and peak resident memory of each round.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import results

VARIANTS = {
    "nmt": [sys.executable, "-m", "cli"],
    # main() as `nmt` ran it before: nothing frozen, sys.exit's full teardown.
    "interpreter_defaults": [sys.executable, "-c", "import gc, sys; gc.freeze = lambda: None; "
                             "from cli.main import main; sys.exit(main())"],
}
EVERY_NTH_LINE = 50
TRAIN_STEPS = 200


def _measure(command: list[str]) -> dict:
    """Runs `command` from this small process (so its peak memory is its own)."""
    started = time.monotonic()
    child = subprocess.Popen(command, cwd=results.REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed:\n{stderr[-3000:]}")
    return {"wall_s": round(time.monotonic() - started, 2),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_mb": round(usage.ru_maxrss / 1024)}


def _round(variant: str, data: str, work: str) -> dict:
    root = os.path.join(work, f"root-{variant}")
    shutil.rmtree(root, ignore_errors=True)
    prefix = VARIANTS[variant]
    return {
        "run": _measure([*prefix, "run", "--data", data, "--pipeline-root", root,
                         "--profile", "smoke", "--train-steps", str(TRAIN_STEPS)]),
        "translate": _measure([*prefix, "translate", "--pipeline-root", root, "Hello."]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", help="also write a result file (a bare name: in "
                                         "benchmarks/results/)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="nmt_interpreter_time_")
    data = os.path.join(work, "fra.txt")
    with open(args.data, encoding="utf-8") as source, open(data, "w", encoding="utf-8") as f:
        f.writelines(line for i, line in enumerate(source) if i % EVERY_NTH_LINE == 0)
    rounds: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    try:
        for number in range(args.rounds):
            order = list(VARIANTS) if number % 2 else list(reversed(VARIANTS))
            for variant in order:
                rounds[variant].append(_round(variant, data, work))
                print(f"round {number + 1}/{args.rounds}, {variant}: {rounds[variant][-1]}",
                      file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {"rounds": rounds, "median": {
        variant: {command: {key: statistics.median(r[command][key] for r in measured)
                            for key in ("wall_s", "cpu_s", "peak_mb")}
                  for command in ("run", "translate")}
        for variant, measured in rounds.items()}}
    results.emit(args.output, "`nmt run --profile smoke` and `nmt translate` with the "
                 "interpreter housekeeping and with the interpreter's defaults, alternating "
                 "rounds", figures)


if __name__ == "__main__":
    main()
