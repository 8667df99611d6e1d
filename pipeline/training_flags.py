"""The Trainer's flags, the same for `nmt run` and `nmt kubeflow compile`: profile, time
budget or steps, precision, hyperparameter overrides and the Evaluator's BLEU threshold."""
from __future__ import annotations

import argparse
from typing import Any

from trainer_module import hparams as hparams_lib


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _hparam(text: str) -> tuple[str, object]:
    try:
        return hparams_lib.parse_override(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_training_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    profiles = hparams_lib.PROFILES
    parser.add_argument(
        "--profile", default="cpu", choices=sorted(profiles),
        help="model/training profile: smoke (seconds, CI), cpu (default: 30 minutes), cpu_2h "
             "(two hours), base (the paper's base model, for a GPU), seeds (the old recipe, "
             "for comparison)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument(
        "--train-minutes", type=float, default=None,
        help="train for as many steps as this machine does in this many minutes, with the "
             "recipe they afford (default: the profile's; cpu: 30)")
    budget.add_argument(
        "--train-steps", type=positive_int, default=None,
        help="train exactly this many steps, no time budget (the end of a budgeted run's log "
             "prints the flags that repeat it)")
    parser.add_argument(
        "--hparam", dest="hparams", action="append", type=_hparam, default=[],
        metavar="NAME=VALUE",
        help="override one hyperparameter of the profile, repeatable, e.g. "
             "--hparam ema_momentum=0.995 --hparam shuffle_pairs=200000")
    parser.add_argument(
        "--precision", choices=hparams_lib.PRECISIONS, default=None,
        help="training precision (default: the profile's); auto: mixed_float16 on GPUs, "
             "mixed_bfloat16 on CPUs with AMX/AVX512-BF16 where a short probe finds it "
             "faster, else float32. The export keeps float32 weights whatever trained it, "
             "and decodes with bfloat16 copies where this CPU's units decode faster "
             "(--hparam decode_precision=float32 for serving on a CPU without them)")
    parser.add_argument(
        "--min-bleu", type=float, default=None,
        help="bless only models with at least this BLEU (default per profile: "
             + ", ".join(f"{name} {p.min_bleu:g}" for name, p in profiles.items()) + ")")


def training_config(args: argparse.Namespace) -> dict[str, Any]:
    """The PipelineConfig fields the flags above set."""
    return dict(profile=args.profile, train_minutes=args.train_minutes,
                train_steps=args.train_steps, precision=args.precision,
                hparams=dict(args.hparams), min_bleu=args.min_bleu)
