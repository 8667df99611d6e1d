"""`nmt`: the one command-line entry point: run, translate, kubeflow, metadata, report."""
from __future__ import annotations

import os
import sys

# Before TF loads: its C++ start-up chatter (CUDA factory registration "errors" on machines
# without a GPU, CPU feature notes) is noise to a user; -v/--verbose shows it.
if not {"-v", "--verbose"} & set(sys.argv[1:]):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Also before TF loads: TensorFlow turns its oneDNN CPU kernels on by itself only on CPUs with
# AVX512-VNNI, bfloat16 or AMX units, yet they train faster than its default Eigen kernels on
# AVX2-only CPUs too (BENCHMARKS.md, "oneDNN kernels"); TF_ENABLE_ONEDNN_OPTS=0 keeps Eigen. The image sets the same for the compiled pipeline.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

import argparse
import warnings

# Google client libraries warn at import about Python versions they will drop one day.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")

from pipeline import config as config_lib
from components.fra_example_gen import parser
from components.fra_example_gen.splits import parse_split_percentages
from pipeline import data_source, logs, run_lock
from pipeline.kubeflow_cli import add_kubeflow_parser
from pipeline.metadata_cli import add_metadata_parser, add_report_parser
from pipeline.training_flags import add_training_flags, positive_int, training_config
from pipeline.translate import TranslateError
from trainer_module.tokens import DEFAULT_TOKENIZER, TOKENIZERS


def _add_run_parser(subparsers) -> None:
    run = subparsers.add_parser("run", help="run the pipeline locally (LocalDagRunner)")
    run.add_argument("--data", help="fra.txt, or a directory or glob of such files, plain or "
                     ".gz, local or gs:// (default: $FRA_TXT, else download fra.txt)")
    run.add_argument("--pipeline-root", default=None,
                     help="where artifacts and metadata.sqlite go "
                          "(default: $NMT_PIPELINE_ROOT or ./nmt_runs)")
    run.add_argument("--pipeline-name", default=config_lib.PIPELINE_NAME)
    run.add_argument("--split", type=parse_split_percentages, default=(80, 10, 10),
                     help="train,eval,test percentages, down to 0.0001 (default 80,10,10; "
                          "on a large corpus e.g. 99.8,0.1,0.1 keeps the Evaluator's split small)")
    run.add_argument("--max-line-bytes", type=int, default=parser.DEFAULT_MAX_LINE_BYTES,
                     help="longer input lines are rejected and counted")
    run.add_argument("--max-references", type=positive_int,
                     default=parser.DEFAULT_MAX_REFERENCES,
                     help="French references kept per English sentence, the rest counted "
                          "(default %(default)s, the schema's limit)")
    run.add_argument("--beam-arg", action="append", default=None, dest="beam_args",
                     help="Beam pipeline argument, repeatable (default: "
                          + " ".join(config_lib.DEFAULT_BEAM_ARGS) + ")")
    add_training_flags(run)
    run.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, choices=TOKENIZERS,
                     help="wordpiece: subwords learned by Transform (default); word: whole "
                          "words, rare ones become [UNK] (the seeds')")
    run.add_argument("--vocab-size", type=int, default=config_lib.PipelineConfig.vocab_size,
                     help="pieces (or words) per language learned by Transform")
    defaults = config_lib.PipelineConfig
    run.add_argument("--whole-numbers", action=argparse.BooleanOptionalAction,
                     default=defaults.whole_numbers,
                     help="keep separators inside numbers (3,50 5:30 10.5) so translations "
                          "show them unchanged (default); --no-whole-numbers splits them off")
    run.add_argument("--split-elisions", action=argparse.BooleanOptionalAction,
                     default=defaults.split_elisions,
                     help="split French elisions off the next word (l'homme -> l' homme; "
                          "rejoined in translations; default); --no-split-elisions keeps them "
                          "glued")
    run.add_argument("--joint-vocab", dest="joint_vocabulary",
                     action=argparse.BooleanOptionalAction, default=defaults.joint_vocabulary,
                     help="one vocabulary for English and French (--vocab-size pieces in all), "
                          "source/target/output embeddings tied")
    run.add_argument("--wordpiece-min-count", type=positive_int,
                     default=defaults.wordpiece_min_count,
                     help="the WordPiece learner keeps no piece seen fewer times (default "
                          f"{defaults.wordpiece_min_count})")
    run.add_argument("--max-metric-drop", type=float, default=config_lib.DEFAULT_MAX_METRIC_DROP,
                     help="bless only if BLEU and chrF are at most this many points below the "
                          "latest blessed model")
    run.add_argument("--no-cache", action="store_true", help="re-execute every component")
    run.add_argument("--to", dest="to_component", metavar="COMPONENT",
                     help="stop after this component, e.g. StrictExampleValidator")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    data_path = data_source.resolve_data_path(args.data)
    kwargs = {}
    if args.pipeline_root:
        kwargs["pipeline_root"] = args.pipeline_root
    config = config_lib.PipelineConfig(
        data_path=data_path, pipeline_name=args.pipeline_name,
        split_percentages=args.split, max_line_bytes=args.max_line_bytes,
        max_references=args.max_references,
        **training_config(args), tokenizer=args.tokenizer, vocab_size=args.vocab_size,
        whole_numbers=args.whole_numbers, split_elisions=args.split_elisions,
        joint_vocabulary=args.joint_vocabulary, wordpiece_min_count=args.wordpiece_min_count,
        max_metric_drop=args.max_metric_drop,
        beam_pipeline_args=tuple(args.beam_args or config_lib.DEFAULT_BEAM_ARGS),
        enable_cache=not args.no_cache, **kwargs)
    try:
        with run_lock.pipeline_root_lock(config.pipeline_root):  # refuses before loading TFX
            from components.strict_example_validator import DataValidationError
            from pipeline import local_runner

            try:
                local_runner.run(config, args.to_component)
            except (DataValidationError, parser.InputDataError) as err:
                raise run_lock.RunError(str(err)) from err
    except run_lock.RunError as err:  # already worded for people: one line
        print(f"nmt: error: {err}", file=sys.stderr)
        return 1
    return 0


def _add_translate_parser(subparsers) -> None:
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
    translate.set_defaults(handler=_translate)


def _translate(args: argparse.Namespace) -> int:
    from pipeline import translate  # heavy (TF): only when needed

    serving_dir = args.model or config_lib.PipelineConfig(
        data_path="", pipeline_name=args.pipeline_name,
        **({"pipeline_root": args.pipeline_root} if args.pipeline_root else {})).serving_dir
    model_dir = translate.resolve_model_dir(serving_dir)
    if args.sentences:
        sentences = [translate.clean_line(s.encode("utf-8", "surrogateescape"), n)
                     for n, s in enumerate(args.sentences, start=1)]
    else:
        sentences = translate.read_stdin_lines()
    for line in translate.translate(sentences, model_dir, args.beam):
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nmt", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show all library logs")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(subparsers)
    _add_translate_parser(subparsers)
    add_kubeflow_parser(subparsers)
    add_metadata_parser(subparsers)
    add_report_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logs.configure(args.verbose)
    try:
        return args.handler(args)
    except (data_source.DataSourceError, parser.InputDataError, TranslateError) as err:
        print(f"nmt: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
