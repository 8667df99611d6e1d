"""`nmt`: the one command-line entry point: run, translate, evaluate, kubeflow, metadata,
report."""
from __future__ import annotations

import os
import sys

# Before TF loads: its C++ start-up chatter (CUDA factory registration "errors" on machines
# without a GPU, CPU feature notes) is noise to a user; -v/--verbose shows it.
if not {"-v", "--verbose"} & set(sys.argv[1:]):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from runners import tensorflow_env

tensorflow_env.apply_defaults()  # also before TF loads: its oneDNN kernels

import argparse
import warnings

# Google client libraries warn at import about Python versions they will drop one day.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")

from cli import errors, evaluate, kubeflow, metadata, report, run, translate
from runners import interpreter, logs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nmt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show all library logs")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in (run, translate, evaluate, kubeflow, metadata, report):
        command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.verbose)
    return errors.run_handler(args)


def entry_point() -> None:
    """`nmt` and `python -m cli`: main() in a process that ends as soon as main returns."""
    interpreter.exit_now(main())


if __name__ == "__main__":
    entry_point()
