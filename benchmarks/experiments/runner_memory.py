"""Whose is ExampleGen's memory growth (issue #28)? FraTxtExampleGen beside a plain Beam
pipeline of the same shape and none of this project's code, at two corpus sizes, in turn.

Usage:
  PYTHONPATH=. .venv/bin/python -m benchmarks.experiments.runner_memory --sizes 4,16 \
      --modes multi_processing,in_memory --data-root /work/scale_data \
      --out runner_memory.json

The plain pipeline reads the same corpus files with Beam's ReadFromText, groups the French
references by English sentence (GroupByKey), joins each group into one line, reshuffles
(as TFX's WriteSplit does before writing) and writes text: the two shuffles of the whole
corpus that ExampleGen also has, with DoFns that hold one element at a time. If its runner
process and its largest worker grow by as many bytes per line as ExampleGen's do, the growth
is the DirectRunner's: the FnApiRunner keeps every shuffle's data in the runner's memory
(execution.GroupingBuffer) and hands each worker its whole share of a stage as one bundle.

For each size, mode and variant (ExampleGen first, then the plain pipeline), each in its own
process: wall time and the peaks of the process tree's RSS, the runner process's (in_memory:
the only process) and the largest worker's (scale.PeakMemory). The summary gives, per variant
and mode, each peak's growth from the smallest to the largest size and the bytes it grew per
added line. Results go to --out, a result file (benchmarks/results.py), rewritten after
every run.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import os
import shutil
import subprocess
import sys
import time

from benchmarks import scale

VARIANTS = ("FraTxtExampleGen", "plain_beam")


def plain_pipeline(corpus: str, out_dir: str, beam_args: list[str]) -> None:
    """Lines -> (English, French) -> GroupByKey -> one line per English sentence -> Reshuffle
    -> text files."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    def pair(line: str):
        fields = line.split("\t", 2)
        if len(fields) >= 2:
            yield fields[0], fields[1]

    with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
        _ = (pipeline
             | "Read" >> beam.io.ReadFromText(os.path.join(corpus, "*"))
             | "Pairs" >> beam.FlatMap(pair)
             | "GroupByEnglish" >> beam.GroupByKey()
             | "Join" >> beam.MapTuple(lambda english, french: "\t".join([english,
                                                                           *sorted(french)]))
             | "Shuffle" >> beam.Reshuffle()
             | "Write" >> beam.io.WriteToText(os.path.join(out_dir, "grouped")))


def run_plain(corpus: str, out_dir: str, args: list[str], log_path: str) -> dict:
    """The plain pipeline in its own process, sampled as scale.run_component samples nmt."""
    command = [sys.executable, os.path.abspath(__file__), "--plain-corpus", corpus,
               "--plain-out", out_dir, *[f"--beam-arg={a}" for a in args]]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [scale.REPO, *filter(None, [os.environ.get("PYTHONPATH")])])}
    with open(log_path, "w") as log:
        started = time.monotonic()
        process = subprocess.Popen(command, cwd=scale.REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        sampler = scale.PeakMemory(process.pid)
        sampler.start()
        returncode = process.wait()
        wall_s = time.monotonic() - started
        sampler.stop()
    written = 0
    for path in glob.glob(os.path.join(out_dir, "grouped*")):
        with open(path, encoding="utf-8") as f:
            written += sum(1 for _ in f)
    return {"status": "ok" if returncode == 0 else "failed", "returncode": returncode,
            "subprocess_s": round(wall_s, 2),
            "peak_rss_mb": round(sampler.peak_bytes / 2**20, 1),
            "peak_root_rss_mb": round(sampler.peak_root_bytes / 2**20, 1),
            "peak_worker_rss_mb": round(sampler.peak_descendant_bytes / 2**20, 1),
            "groups_written": written, "log": log_path}


def in_memory_args(mode: str, workers: int) -> list[str]:
    """scale.beam_args, with nmt's in-memory defaults spelled out for the plain pipeline."""
    return scale.beam_args(mode, workers) or ["--direct_running_mode=in_memory",
                                              "--direct_num_workers=1"]


def summarize(rows: list[dict]) -> list[dict]:
    """Per variant and mode: each peak from the smallest to the largest size, its ratio and
    the bytes it grew per added corpus line."""
    summary = []
    for variant in VARIANTS:
        for mode in scale.MODES:
            done = sorted((r for r in rows if r["variant"] == variant and r["mode"] == mode
                           and r["status"] == "ok"), key=lambda r: r["size"])
            if len(done) < 2:
                continue
            small, large = done[0], done[-1]
            added_lines = large["corpus_lines"] - small["corpus_lines"]
            entry = {"variant": variant, "mode": mode, "sizes": [small["size"], large["size"]],
                     "seconds": [small["subprocess_s"], large["subprocess_s"]]}
            for peak in ("peak_rss_mb", "peak_root_rss_mb", "peak_worker_rss_mb"):
                if not small[peak]:
                    continue
                entry[peak] = [small[peak], large[peak]]
                entry[peak.replace("_mb", "_ratio")] = round(large[peak] / small[peak], 2)
                entry[peak.replace("_mb", "_bytes_per_line")] = round(
                    (large[peak] - small[peak]) * 2**20 / added_lines)
            summary.append(entry)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    scale.add_corpus_arguments(parser, sizes="4,16")
    parser.add_argument("--out", default="runner_memory.json",
                        help="a result file (a bare name: in benchmarks/results/)")
    parser.add_argument("--plain-corpus", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--plain-out", help=argparse.SUPPRESS)
    parser.add_argument("--beam-arg", action="append", default=[], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plain_corpus:
        plain_pipeline(args.plain_corpus, args.plain_out, args.beam_arg)
        return
    sizes = sorted(int(s) for s in args.sizes.split(","))
    modes = args.modes.split(",")
    if set(modes) - set(scale.MODES) or min(sizes) < 1:
        parser.error(f"modes are {', '.join(scale.MODES)}; sizes are >= 1")

    results = scale.Results(args.out, {"machine": scale.machine_info(), "argv": sys.argv[1:]},
                            overwrite=True, measured="peak memory of ExampleGen beside a "
                            "plain Beam pipeline grouping the same corpus, per size and mode")
    runs_root = os.path.join(args.data_root, "runner_memory_runs")
    os.makedirs(runs_root, exist_ok=True)
    steps = [(m, k, v) for m in modes for k in sizes for v in VARIANTS]
    started = time.monotonic()
    for number, (mode, size, variant) in enumerate(steps, 1):
        corpus = scale.corpus_dir(args.data_root, size, args.lines, False)
        manifest = scale.ensure_corpus(corpus, args.source, size, args.lines, False, seed=0)
        root = os.path.join(runs_root, f"x{size}_{mode}_{variant}")
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        log_path = root + ".log"
        if variant == "plain_beam":
            run = run_plain(corpus, root, in_memory_args(mode, args.workers), log_path)
        else:
            run = scale.run_component(corpus, root, variant, scale.beam_args(mode, args.workers),
                                      log_path, timeout_s=None)
        shutil.rmtree(root, ignore_errors=True)
        results.add({"variant": variant, "mode": mode, "size": size,
                     "corpus_lines": manifest["lines_written"],
                     "corpus_bytes": manifest["bytes"],
                     "started": datetime.datetime.now().astimezone().isoformat(
                         timespec="seconds"), **run})
        # Every run's cost is about linear in the size: the ETA scales the time so far.
        done_units = sum(k for _, k, _ in steps[:number])
        eta = (time.monotonic() - started) / done_units * sum(k for _, k, _ in steps[number:])
        print(f"[{number}/{len(steps)}] {size}x {mode} {variant}: {run['status']}, "
              f"{run['subprocess_s']:.0f} s, peak runner {run['peak_root_rss_mb']:.0f} MB, "
              f"worker {run['peak_worker_rss_mb']:.0f} MB; ETA {scale.duration(eta)}",
              file=sys.stderr, flush=True)
    results.data["summary"] = summarize(results.data["rows"])
    results.save()
    for entry in results.data["summary"]:
        print(entry, file=sys.stderr)
    print(f"results: {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
