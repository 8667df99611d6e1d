"""Split percentages become hash buckets on the English sentence."""
import pytest

from components.fra_example_gen.component import split_output_config


def test_percentages_become_smallest_buckets():
    config = split_output_config((80, 10, 10))
    assert [(s.name, s.hash_buckets) for s in config.split_config.splits] == [
        ("train", 8), ("eval", 1), ("test", 1)]
    assert config.split_config.partition_feature_name == "english"
    assert [s.hash_buckets for s in split_output_config((90, 5, 5)).split_config.splits] == [
        18, 1, 1]


@pytest.mark.parametrize("bad", [(80, 10), (80, 10, 20), (100, 0, 0), (80, -10, 30)])
def test_bad_percentages_are_refused(bad):
    with pytest.raises(ValueError, match="Split percentages"):
        split_output_config(bad)
