"""`nmt run`: the pipeline on this machine (TFX's LocalDagRunner)."""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from typing import Any

from components.fra_example_gen import parser
from components.fra_example_gen.splits import parse_split_percentages
from cli.errors import UsageError
from pipeline import config as config_lib
from pipeline import data_source
from runners import run_lock
from pipeline.training_flags import add_training_flags, positive_int, training_config
from transform_module.tokens import DEFAULT_TOKENIZER, TOKENIZERS


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    run = subparsers.add_parser("run", help="run the pipeline locally (LocalDagRunner)")
    run.add_argument("--data", help="fra.txt, or a directory or glob of such files, plain or "
                     ".gz, local or gs://, or numbered spans such as 'DIR/fra-{SPAN}.txt' "
                     "(the newest is read) (default: $FRA_TXT, else download fra.txt)")
    run.add_argument("--spans", type=positive_int, default=1, metavar="N",
                     help="with {SPAN} in --data: read the newest N spans (default 1)")
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
    run.add_argument("--beam-runner", choices=("direct", "flink"), default="direct",
                     help="the Beam engine of ExampleGen, StatisticsGen, Transform and the "
                          "Evaluator: direct (default: in memory, here) or flink (Apache Flink "
                          "through Beam's portable runner: an embedded cluster using every "
                          "core, or --flink-master; set up by `make flink`)")
    run.add_argument("--flink-master", metavar="HOST:PORT",
                     help="with --beam-runner flink: a running Flink 1.16 cluster's REST "
                          "address instead of an embedded one")
    run.add_argument("--beam-arg", action="append", default=None, dest="beam_args",
                     help="Beam pipeline argument, repeatable (default with --beam-runner "
                          "direct: " + " ".join(config_lib.DEFAULT_BEAM_ARGS) + "; with flink "
                          "they are added to the engine's)")
    add_training_flags(run)
    run.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, choices=TOKENIZERS,
                     help="sentencepiece: a unigram-LM subword model learned by Transform "
                          "(default); wordpiece: WordPiece subwords learned by Transform; "
                          "word: whole words, rare ones become [UNK] (the seeds')")
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
                          "source/target/output embeddings tied (default); --no-joint-vocab "
                          "learns one per language")
    run.add_argument("--wordpiece-min-count", type=positive_int,
                     default=defaults.wordpiece_min_count,
                     help="the WordPiece learner keeps no piece seen fewer times (default "
                          f"{defaults.wordpiece_min_count})")
    run.add_argument("--max-metric-drop", type=float, default=config_lib.DEFAULT_MAX_METRIC_DROP,
                     help="bless only if BLEU and chrF are at most this many points below the "
                          "latest blessed model")
    run.add_argument("--warm-start", action="store_true",
                     help="start training from the newest served model's weights, its "
                          "vocabulary kept (from scratch if nothing is served yet)")
    run.add_argument("--fresh-if-incompatible", action="store_true",
                     help="with --warm-start: train from scratch when this run's settings "
                          "cannot continue the served model (else that is an error)")
    run.add_argument("--no-cache", action="store_true", help="re-execute every component")
    run.add_argument("--to", dest="to_component", metavar="COMPONENT",
                     help="stop after this component, e.g. StrictExampleValidator")
    run.set_defaults(handler=run_command)


def run_command(args: argparse.Namespace) -> int:
    if args.flink_master and args.beam_runner != "flink":
        raise UsageError("--flink-master goes with --beam-runner flink.")
    data_path = data_source.resolve_data_path(args.data, newest_spans=args.spans)
    kwargs = {}
    if args.pipeline_root:
        kwargs["pipeline_root"] = args.pipeline_root
    config = config_lib.PipelineConfig(
        data_path=data_path, pipeline_name=args.pipeline_name,
        split_percentages=args.split, max_line_bytes=args.max_line_bytes,
        max_references=args.max_references, newest_spans=args.spans,
        **training_config(args), tokenizer=args.tokenizer, vocab_size=args.vocab_size,
        whole_numbers=args.whole_numbers, split_elisions=args.split_elisions,
        joint_vocabulary=args.joint_vocabulary, wordpiece_min_count=args.wordpiece_min_count,
        max_metric_drop=args.max_metric_drop,
        beam_pipeline_args=tuple(args.beam_args or config_lib.DEFAULT_BEAM_ARGS),
        enable_cache=not args.no_cache, **kwargs)
    if args.fresh_if_incompatible and not args.warm_start:
        raise UsageError("--fresh-if-incompatible goes with --warm-start.")
    engine = contextlib.nullcontext()
    if args.beam_runner == "flink":
        from engines import flink

        jar = flink.check(args.flink_master)  # no Java, no cluster: before anything is written
        engine = flink.flink_engine(os.path.join(config.pipeline_root, "flink"), jar,
                                    args.flink_master)
    with run_lock.pipeline_root_lock(config.pipeline_root):
        if args.warm_start:  # under the lock: no push of another run between plan and run
            from pipeline import warm_start

            config = warm_start.plan(config, args.fresh_if_incompatible)
        with engine as started:
            _run(config, args, started)
    return 0


def _run(config: config_lib.PipelineConfig, args: argparse.Namespace, started: Any) -> None:
    """The pipeline through LocalDagRunner, on the Flink engine `started` if not None."""
    from components.strict_example_validator import DataValidationError
    from runners import local_runner

    if started is not None:
        config = dataclasses.replace(
            config, beam_pipeline_args=started.beam_args + tuple(args.beam_args or ()))
    try:
        local_runner.run(config, args.to_component, flink_engine=started)
    except (DataValidationError, parser.InputDataError) as err:
        # Bad data found by the run is a failed run (status 1), not a usage error as
        # when resolve_data_path finds it before anything starts.
        raise run_lock.RunError(str(err)) from err
