"""Train/eval/test split percentages -> hash buckets. Pure Python (no TFX), so `nmt`'s
argument parsing can use it without loading TFX; component.py turns the buckets into
ExampleGen's output config."""
from __future__ import annotations

import argparse
import math
from fractions import Fraction
from typing import Sequence

SPLIT_NAMES = ("train", "eval", "test")
# The finest split percentage: 0.0001 % is still 200 sentences of 200 M pairs. It keeps the
# hash buckets at most 1,000,000, and a typo such as 33.33333333 is refused rather than turned
# into billions of buckets.
MIN_SPLIT_PERCENT = Fraction(1, 10_000)


def split_hash_buckets(percentages: Sequence[float]) -> tuple[int, int, int]:
    """The fewest hash buckets in exactly the given ratio: (80, 10, 10) -> (8, 1, 1),
    (99.8, 0.1, 0.1) -> (998, 1, 1).

    Each percentage is taken as written in decimal (Fraction(str(p)): 0.1 is 1/10, not the
    nearest binary float), so 99.8 + 0.1 + 0.1 is exactly 100, and whole percentages reduce to
    the buckets they always had.
    """
    shown = list(percentages)
    not_three = ValueError(f"Split percentages must be three positive numbers for "
                           f"{'/'.join(SPLIT_NAMES)}, got {shown}.")
    if len(shown) != len(SPLIT_NAMES):
        raise not_three
    try:
        exact = [Fraction(str(p)) for p in shown]
    except ValueError:
        raise not_three from None
    if any(p <= 0 for p in exact):
        raise not_three
    if sum(exact) != 100:
        raise ValueError(f"Split percentages must add up to 100, got {shown} "
                         f"(sum {float(sum(exact))}).")
    if any((p / MIN_SPLIT_PERCENT).denominator != 1 for p in exact):
        raise ValueError(f"Split percentages must not be finer than {float(MIN_SPLIT_PERCENT)} %"
                         f", got {shown}.")
    scale = math.lcm(*(p.denominator for p in exact))
    whole = [int(p * scale) for p in exact]
    divisor = math.gcd(*whole)
    return tuple(w // divisor for w in whole)


def parse_split_percentages(text: str) -> tuple[float, float, float]:
    """`--split`'s text, e.g. "80,10,10" or "99.8,0.1,0.1" -> the three percentages, checked
    as split_hash_buckets checks them. Raises argparse.ArgumentTypeError, whose message
    argparse shows as it is (it replaces a ValueError's with "invalid ... value")."""
    try:
        percentages = tuple(float(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Split percentages must be three numbers such as 80,10,10 or 99.8,0.1,0.1, "
            f"got {text!r}.") from None
    try:
        split_hash_buckets(percentages)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return percentages
