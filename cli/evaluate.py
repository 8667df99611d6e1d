"""`nmt evaluate`: score a model on a test set as published MT results are scored (sacreBLEU
BLEU and chrF with their signatures), with the training-overlap check: all lines, the lines
whose English the model trained on (seen) and the others (unseen)."""
from __future__ import annotations

import argparse
import json
import os

from cli.metadata import pipeline_root, print_table, store_config, store_flags
from pipeline import config as config_lib


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate", help="BLEU and chrF of a model on a test set, seen and unseen lines apart",
        description=__doc__, parents=[store_flags()])
    data = evaluate.add_argument_group("test set: --source with --reference, or --tsv")
    data.add_argument("--source", metavar="FILE", help="English sentences, one per line")
    data.add_argument("--reference", metavar="FILE", action="append", default=[],
                      help="French references aligned with --source; repeat the flag for "
                           "several references per sentence")
    data.add_argument("--tsv", metavar="FILE", help="a Tatoeba Challenge test file: 4 columns "
                      "(eng, fra, English, French), or 2 (English, French)")
    evaluate.add_argument("--model", help="SavedModel or serving directory (default: the "
                                          "newest version pushed under the pipeline root)")
    evaluate.add_argument("--pipeline-name", default=config_lib.PIPELINE_NAME)
    evaluate.add_argument("--beam", type=int, default=None, metavar="N",
                          help="beam search of width N (the model's exported width); "
                               "default greedy")
    evaluate.add_argument("--hypotheses", metavar="FILE",
                          help="write the translations here, one per line")
    evaluate.add_argument("--no-overlap-check", dest="overlap_check", action="store_false",
                          help="skip the training-overlap check: score all lines only")
    evaluate.add_argument("--json", action="store_true", help="print JSON for scripts")
    evaluate.set_defaults(handler=evaluate_command)


def _test_set(args: argparse.Namespace):
    from cli.errors import UsageError
    from inference.evaluation_set import read_aligned, read_tsv

    if bool(args.tsv) == bool(args.source):
        raise UsageError("nmt evaluate takes --source FILE --reference FILE, or --tsv FILE.")
    if args.tsv and args.reference:
        raise UsageError("--reference goes with --source; a --tsv file holds its references.")
    return read_tsv(args.tsv) if args.tsv else read_aligned(args.source, args.reference)


def _lineage(args: argparse.Namespace, model_dir: str):
    """Where the model learned from, by ML Metadata; a SQLite store is never created here."""
    from inference import evaluate

    if not args.overlap_check:
        return evaluate.Lineage(missing="--no-overlap-check")
    path = os.path.join(pipeline_root(args), "metadata.sqlite")
    if not (args.grpc_host or args.mysql_host or os.path.isfile(path)):
        return evaluate.Lineage(missing=f"there is no ML Metadata store at {path} "
                                        "(--pipeline-root)")
    return evaluate.training_lineage(store_config(args), model_dir)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_result(result: dict) -> None:
    print(f"Model: {result['model']} ({result['decoding']} decoding)")
    print(f"Test set: {result['test_set']}, {result['lines']:,} lines, "
          f"{result['references_per_line']} reference(s) per line")
    found = result["overlap"]
    if "missing" in found:
        print(f"Training overlap: not checked: {found['missing']}. All lines are scored "
              "together.")
    else:
        print(f"Training overlap: {found['seen_exactly']:,} of {result['lines']:,} English "
              f"sentences occur in the model's training data exactly, "
              f"{found['seen_normalized']:,} after normalization ({found['normalization']}); "
              f"model {found['model']}, {found['training_sentences']:,} training sentences "
              f"in {', '.join(found['train_splits'])}.")
    rows = [{"part": name, "lines": f"{part['lines']:,}", "bleu": _number(part["bleu"]),
             "chrf": _number(part["chrf"])} for name, part in result["scores"].items()]
    print_table(rows, [("part", ""), ("lines", "LINES"), ("bleu", "BLEU"), ("chrf", "CHRF")])
    every = result["scores"]["all"]
    print(f"BLEU signature: {every['bleu_signature']}")
    print(f"chrF signature: {every['chrf_signature']}")
    print(f"Speed: {result['sentences_per_second']:.1f} sentences per second")
    if result["hypotheses"]:
        print(f"Translations: {result['hypotheses']}")


def evaluate_command(args: argparse.Namespace) -> int:
    test_set = _test_set(args)  # every file checked before the model loads
    from inference import evaluate
    from inference import translate  # heavy (TF): only when needed

    requests_at_once = translate.set_up_serving()  # before TensorFlow starts
    serving_dir = args.model or config_lib.PipelineConfig(
        data_path="", pipeline_name=args.pipeline_name,
        pipeline_root=pipeline_root(args)).serving_dir
    model_dir = translate.resolve_model_dir(serving_dir)
    result = evaluate.evaluate(test_set, model_dir, args.beam, _lineage(args, model_dir),
                               args.hypotheses, requests_at_once)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
    return 0
