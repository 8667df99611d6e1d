"""The default `make run` as one result file, behind README's scores table: its steps and
training minutes (the Trainer's history), the whole run's minutes and peak memory
(`/usr/bin/time -v`'s log), and the pushed model's scores: the dev set greedy and with beam 4
(`nmt evaluate --json`), the test split (quality.py).

Usage, from a fresh pipeline root, alone on the machine:
  /usr/bin/time -v -o time.log make run ARGS="--data fra.txt"
  D=../shared/data/tatoeba-dev/tatoeba-test-v2021-08-07.unseen
  .venv/bin/nmt evaluate --source $D.eng --reference $D.fra --json > dev_greedy.json
  .venv/bin/nmt evaluate --source $D.eng --reference $D.fra --beam 4 --json > dev_beam.json
  PYTHONPATH=. .venv/bin/python benchmarks/quality.py --pipeline-root nmt_runs \
      --model nmt_runs/serving/nmt-fra-eng/VERSION --split test > test.json
  PYTHONPATH=. .venv/bin/python -m benchmarks.make_run --pipeline-root nmt_runs \
      --time-log time.log --dev-greedy dev_greedy.json --dev-beam dev_beam.json \
      --test test.json --output make_run_MACHINE.json [--commit COMMIT]
"""
from __future__ import annotations

import argparse
import json
import os
import re

from benchmarks import results

MEASURED = ("the default `make run` (cpu profile, 30-minute budget, precision auto) from a fresh "
            "pipeline root, alone on the machine: steps, whole-run minutes and peak memory, the "
            "pushed model's dev-set BLEU/chrF greedy and beam 4 and test-split BLEU")


def time_log(text: str) -> tuple[float, float]:
    """Minutes and peak memory (GB) from `/usr/bin/time -v`'s report."""
    # GNU time: "Elapsed (wall clock) time (h:mm:ss or m:ss): 33:17.04"
    clock = re.search(r"Elapsed \(wall clock\) time(?: \([^)]*\))?:\s*([\d:.]+)",
                      text).group(1)
    seconds = 0.0
    for part in clock.split(":"):  # h:mm:ss or m:ss.ss
        seconds = seconds * 60 + float(part)
    kbytes = int(re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", text).group(1))
    return seconds / 60, kbytes / 2**20


def dev_scores(evaluated: dict) -> dict:
    """The figures a table reads from `nmt evaluate --json`, and the whole of it."""
    scores = evaluated["scores"]["all"]
    return {**{k: scores[k] for k in ("bleu", "chrf", "lines", "bleu_signature",
                                      "chrf_signature")},
            "decoding": evaluated["decoding"], "evaluate": evaluated}


def test_scores(quality: dict) -> dict:
    """The figures a table reads from quality.py's output (one model), and the whole of it."""
    model = next(iter(quality["models"].values()))
    return {"bleu_one_reference": model["overall_first_reference"]["bleu"],
            "chrf_one_reference": model["overall_first_reference"]["chrf"],
            "bleu_all_references": model["overall"]["bleu"], "quality": quality}


def figures(history: list[dict], time_text: str, dev_greedy: dict, dev_beam: dict,
            test: dict) -> dict:
    minutes, peak_gb = time_log(time_text)
    return {"steps": history[-1]["step"],
            "training_minutes": round(history[-1]["train_seconds"] / 60, 2),
            "minutes": round(minutes, 2), "peak_memory_gb": round(peak_gb, 1),
            "dev_greedy": dev_scores(dev_greedy), "dev_beam": dev_scores(dev_beam),
            "test_greedy": test_scores(test)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline-root", required=True)
    parser.add_argument("--time-log", required=True, help="/usr/bin/time -v's report")
    parser.add_argument("--dev-greedy", required=True, help="nmt evaluate --json's output")
    parser.add_argument("--dev-beam", required=True, help="the same with --beam 4")
    parser.add_argument("--test", required=True, help="quality.py's output, --split test")
    parser.add_argument("--commit", help="the commit `make run` ran (default: this "
                                         "checkout's HEAD)")
    parser.add_argument("--output", required=True,
                        help="a result file (a bare name: in benchmarks/results/)")
    args = parser.parse_args()
    from benchmarks.pipeline_outputs import latest  # imports TensorFlow: not for time_log
    model_run = latest(os.path.join(args.pipeline_root, "Trainer", "model_run", "*"))
    loaded = {}
    for name in ("history", "time_log", "dev_greedy", "dev_beam", "test"):
        path = (os.path.join(model_run, "history.json") if name == "history"
                else getattr(args, name))
        with open(path, encoding="utf-8") as f:
            loaded[name] = f.read() if name == "time_log" else json.load(f)
    results.write(args.output, MEASURED, figures(
        loaded["history"], loaded["time_log"], loaded["dev_greedy"], loaded["dev_beam"],
        loaded["test"]), at_commit=args.commit)


if __name__ == "__main__":
    main()
