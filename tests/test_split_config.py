"""Split percentages, whole or decimal, become hash buckets on the English sentence."""
import argparse
import re

import pytest

from components.fra_example_gen.component import split_output_config
from components.fra_example_gen.splits import parse_split_percentages, split_hash_buckets


def test_percentages_become_smallest_buckets():
    config = split_output_config((80, 10, 10))
    assert [(s.name, s.hash_buckets) for s in config.split_config.splits] == [
        ("train", 8), ("eval", 1), ("test", 1)]
    assert config.split_config.partition_feature_name == "english"
    assert [s.hash_buckets for s in split_output_config((90, 5, 5)).split_config.splits] == [
        18, 1, 1]


@pytest.mark.parametrize("percentages, buckets", [
    ((80, 10, 10), (8, 1, 1)),  # what fra.txt's splits have always been
    ((80.0, 10.0, 10.0), (8, 1, 1)),  # the CLI's floats: the same buckets, the same examples
    ((90, 5, 5), (18, 1, 1)),
    ((34, 33, 33), (34, 33, 33)),
    ((99.8, 0.1, 0.1), (998, 1, 1)),  # as floats they add up to 99.99999999999999
    ((99.98, 0.01, 0.01), (9998, 1, 1)),
    ((99.5, 0.25, 0.25), (398, 1, 1)),
    ((99.9998, 0.0001, 0.0001), (999998, 1, 1)),  # the finest resolution
    ((70.5, 20, 9.5), (141, 40, 19)),
])
def test_decimal_percentages_become_exact_buckets(percentages, buckets):
    assert split_hash_buckets(percentages) == buckets


@pytest.mark.parametrize("text, percentages", [
    ("80,10,10", (80, 10, 10)), ("99.8,0.1,0.1", (99.8, 0.1, 0.1)),
    (" 99.98, 0.01 ,0.01", (99.98, 0.01, 0.01)), ("99.9998,1e-4,0.0001", (99.9998, 1e-4, 1e-4)),
])
def test_split_text_is_parsed(text, percentages):
    assert parse_split_percentages(text) == percentages


@pytest.mark.parametrize("bad, message", [
    ((80, 10), "must be three positive numbers for train/eval/test, got [80, 10]."),
    ((80, 10, 20), "must add up to 100, got [80, 10, 20] (sum 110.0)."),
    ((99.8, 0.1, 0.11), "must add up to 100, got [99.8, 0.1, 0.11] (sum 100.01)."),
    ((100, 0, 0), "must be three positive numbers"),
    ((80, -10, 30), "must be three positive numbers"),
    ((float("nan"), 50, 50), "must be three positive numbers"),
    ((99.99995, 0.00005, 0.0), "must be three positive numbers"),
    ((33.333333, 33.333333, 33.333334), "must not be finer than 0.0001 %"),
])
def test_bad_percentages_are_refused(bad, message):
    with pytest.raises(ValueError, match="^" + re.escape(f"Split percentages {message}")):
        split_output_config(bad)


@pytest.mark.parametrize("text, message", [
    ("80,10", "three positive numbers"), ("80;10;10", "three numbers such as 80,10,10"),
    ("", "three numbers such as"), ("99.8,0.1,0.2", "add up to 100"),
    ("99.99999,0.000005,0.000005", "finer than 0.0001 %"),
])
def test_bad_split_text_is_refused_in_one_sentence(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message) as error:
        parse_split_percentages(text)
    assert str(error.value).startswith("Split percentages ")
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")
