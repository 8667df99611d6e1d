"""`nmt report [RUN]`: an HTML report of a run from ML Metadata: loss curves, BLEU by length,
sample translations, attention (metadata/report.py writes it)."""
from __future__ import annotations

import argparse
import os

from cli.metadata import pipeline_root, store_config, store_flags
from metadata.runs import get_run
from metadata.store import connect


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`nmt report [RUN] [--output DIR] [store flags]`."""
    parser = subparsers.add_parser(
        "report", parents=[store_flags()],
        help="write an HTML report of a run: loss curves, BLEU by length, sample "
             "translations, attention")
    parser.add_argument("run", nargs="?", metavar="RUN",
                        help="run id or a unique prefix (default: the newest run)")
    parser.add_argument("--output", metavar="DIR",
                        help="where report.html and its PNGs go "
                             "(default: <pipeline root>/reports/<run>)")
    parser.add_argument("--samples", type=int, default=8,
                        help="eval sentences to translate (default 8)")
    parser.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace) -> int:
    from metadata import report  # heavy (TF, matplotlib): only when needed

    store = connect(store_config(args))
    run_id = get_run(store, args.run)["run"]
    output = args.output or os.path.join(pipeline_root(args), "reports",
                                         run_id.replace(":", ""))
    print(report.write_report(store, run_id, output, args.samples))
    return 0
