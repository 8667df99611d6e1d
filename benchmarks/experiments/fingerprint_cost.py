"""What ExampleGen's input fingerprint costs per run on a multi-GB input (issue #28, item 3).

Makes an input of --gigabytes (fra.txt's bytes repeated, in --files files) and times what one
run hashes: the driver's digest of every file (its cache key, even when the run is a cache
hit), and the executor's lookup of those digests (it hashes nothing when the driver recorded
them). Before the change, the executor hashed every byte a second time. Object stores
(gs://) answer the store's checksum instead and read nothing: not measurable here.

    python benchmarks/experiments/fingerprint_cost.py --fra-txt ../shared/data/fra-eng/fra.txt \
        --out-dir /tmp/fingerprint --gigabytes 4 --json benchmarks/results/results_fingerprint.json
"""
from __future__ import annotations

import argparse
import json
import os
import time

from benchmarks.scale import machine_info
from components.fra_example_gen import fingerprint


def make_input(fra_txt: str, out_dir: str, gigabytes: float, files: int) -> list[str]:
    """`files` files of fra.txt's bytes repeated, `gigabytes` in all (kept if already there)."""
    os.makedirs(out_dir, exist_ok=True)
    block = open(fra_txt, "rb").read()
    per_file = int(gigabytes * 2**30 / files)
    paths = []
    for i in range(files):
        path = os.path.join(out_dir, f"part-{i:05d}.txt")
        if not os.path.exists(path) or os.path.getsize(path) != per_file:
            with open(path, "wb") as f:
                for _ in range(per_file // len(block)):
                    f.write(block)
                f.write(block[:per_file % len(block)])
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fra-txt", required=True)
    parser.add_argument("--out-dir", required=True,
                        help="where the input is written (not the repo)")
    parser.add_argument("--gigabytes", type=float, default=4.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    paths = make_input(args.fra_txt, args.out_dir, args.gigabytes, args.files)
    sizes = [(p, os.path.getsize(p)) for p in paths]
    total = sum(size for _, size in sizes)
    rounds = []
    for r in range(args.rounds):
        start = time.monotonic()
        digests = {p: fingerprint.file_digest(p, size) for p, size in sizes}  # the driver
        driver = time.monotonic() - start
        start = time.monotonic()
        fingerprint.reuse_or_compute(sizes, digests)  # the executor, same run
        executor = time.monotonic() - start
        rounds.append({"driver_seconds": round(driver, 2), "executor_seconds": round(executor, 4)})
        print(f"round {r + 1}: driver hashed {total / 2**30:.1f} GiB in {driver:.1f} s "
              f"({total / 2**30 / driver:.2f} GiB/s); executor {executor * 1000:.1f} ms")
    driver = sorted(r["driver_seconds"] for r in rounds)[len(rounds) // 2]
    result = {"machine": machine_info(), "bytes": total,
              "files": len(paths), "rounds": rounds, "median_driver_seconds": driver,
              "per_run_seconds_now": driver, "per_run_seconds_before": 2 * driver,
              "note": "page cache warm after round 1; before = driver + executor both hashing"}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
