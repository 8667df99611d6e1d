"""`nmt translate`: English sentences (arguments, or lines on stdin) into French."""
from __future__ import annotations

import argparse

from pipeline import config as config_lib


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    translate = subparsers.add_parser(
        "translate", help="translate English sentences (arguments, or lines on stdin)")
    translate.add_argument("sentences", nargs="*",
                           help="English sentences; without any, one per line from stdin")
    translate.add_argument("--model", help="SavedModel or serving directory (default: the "
                                           "newest version pushed under the pipeline root)")
    translate.add_argument("--pipeline-root", default=None)
    translate.add_argument("--pipeline-name", default=config_lib.PIPELINE_NAME)
    translate.add_argument("--beam", type=int, default=None, metavar="N",
                           help="beam search of width N (the model's exported width)")
    translate.set_defaults(handler=translate_command)


def translate_command(args: argparse.Namespace) -> int:
    from inference import translate  # heavy (TF): only when needed

    requests_at_once = translate.set_up_serving()  # before TensorFlow starts
    serving_dir = args.model or config_lib.PipelineConfig(
        data_path="", pipeline_name=args.pipeline_name,
        **({"pipeline_root": args.pipeline_root} if args.pipeline_root else {})).serving_dir
    model_dir = translate.resolve_model_dir(serving_dir)
    if args.sentences:
        sentences = [translate.clean_line(s.encode("utf-8", "surrogateescape"), n)
                     for n, s in enumerate(args.sentences, start=1)]
    else:
        sentences = translate.read_stdin_lines()
    for line in translate.translate(sentences, model_dir, args.beam,
                                     requests_at_once=requests_at_once):
        print(line)
    return 0
