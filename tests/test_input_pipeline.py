"""The Trainer's input at scale: workers read disjoint files, memory is bounded (real tf.data
over a real tf.Transform output of a fra.txt sample)."""
from __future__ import annotations

import collections
import dataclasses
import glob
import logging
import os

import pytest
import tensorflow as tf
import tensorflow_transform as tft

import distributed_worker
from trainer_module import input_pipeline
from trainer_module.hparams import get_profile

pytestmark = pytest.mark.scale

FILES = 5


@pytest.fixture(scope="module")
def split(fra_txt, tmp_path_factory) -> tuple[str, tft.TFTransformOutput]:
    """The transformed train split of ~700 fra.txt lines, spread over FILES gzip files as a
    distributed Beam runner writes it (one per bundle)."""
    out = str(tmp_path_factory.mktemp("transformed"))
    distributed_worker.transform(fra_txt, out)
    (whole,) = glob.glob(os.path.join(out, distributed_worker.TRAIN, "*"))
    records = list(tf.data.TFRecordDataset(whole, "GZIP").as_numpy_iterator())
    os.remove(whole)
    for i in range(FILES):
        path = os.path.join(out, distributed_worker.TRAIN, f"part-{i:05d}-of-{FILES:05d}.gz")
        with tf.io.TFRecordWriter(path, "GZIP") as writer:
            for record in records[i::FILES]:
                writer.write(record)
    return (os.path.join(out, distributed_worker.TRAIN, "*"),
            tft.TFTransformOutput(os.path.join(out, "transform")))


def _pairs(dataset: tf.data.Dataset) -> collections.Counter:
    return collections.Counter((tuple(s.numpy()), tuple(t.numpy())) for s, t in dataset)


HPARAMS = dataclasses.replace(get_profile("smoke"), max_source_length=64, max_target_length=64)


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_read_disjoint_files_whose_union_is_the_split(split, workers, caplog):
    pattern, output = split
    files = input_pipeline.match_files(pattern)
    shares = [input_pipeline.worker_files(files, (workers, i)) for i in range(workers)]
    assert all(record_shard == (1, 0) for _, record_shard in shares)  # whole files, no skipping
    assert sorted(f for share, _ in shares for f in share) == files
    assert sum(len(share) for share, _ in shares) == len(files)  # disjoint

    whole = _pairs(input_pipeline.read_pairs(pattern, output, HPARAMS))
    union = collections.Counter()
    for i in range(workers):
        union += _pairs(input_pipeline.read_pairs(pattern, output, HPARAMS, shard=(workers, i)))
    assert union == whole and sum(whole.values()) > 500
    assert "wrote" not in caplog.text  # no fallback warning


def test_a_restarted_jobs_temporary_directory_is_not_read(split):
    """Flink restarting Transform's job after a lost TaskManager can leave the killed
    attempt's `beam-temp-*` directory inside Split-train; the Trainer reads the files only."""
    pattern, output = split
    files = input_pipeline.match_files(pattern)
    stray = os.path.join(os.path.dirname(pattern), "beam-temp-transformed_examples-0123")
    os.makedirs(stray)
    try:
        open(os.path.join(stray, "part"), "wb").close()
        assert input_pipeline.match_files(pattern) == files
        assert sum(_pairs(input_pipeline.read_pairs(pattern, output, HPARAMS)).values()) > 500
    finally:
        os.remove(os.path.join(stray, "part"))
        os.rmdir(stray)


def test_fewer_files_than_workers_still_splits_the_examples(split, caplog):
    pattern, output = split
    workers = FILES + 1
    with caplog.at_level(logging.WARNING):
        parts = [_pairs(input_pipeline.read_pairs(pattern, output, HPARAMS, shard=(workers, i)))
                 for i in range(workers)]
    assert sum(parts, collections.Counter()) == _pairs(
        input_pipeline.read_pairs(pattern, output, HPARAMS))
    assert f"Transform wrote {FILES} file(s) for {workers} training workers" in caplog.text


def test_an_epoch_re_reads_every_pair_when_the_cache_budget_is_too_small(split, caplog):
    """cache_megabytes=0: nothing cached; each epoch reads the files in a new order, and every
    epoch still holds every pair once."""
    pattern, output = split
    whole = _pairs(input_pipeline.read_pairs(pattern, output, HPARAMS))
    n = sum(whole.values())
    uncached = dataclasses.replace(HPARAMS, cache_megabytes=0, shuffle_pairs=n)
    assert not input_pipeline.fits_in_cache(input_pipeline.match_files(pattern), uncached)
    assert input_pipeline.fits_in_cache(input_pipeline.match_files(pattern), HPARAMS)
    with caplog.at_level(logging.INFO):
        input_pipeline.make_dataset(pattern, output, uncached, training=True)
    assert "do not fit the 0 MB cache (cache_megabytes): each epoch reads them again" in \
        caplog.text
    reads = input_pipeline.read_pairs(pattern, output, uncached, file_order_seed=0).repeat(2)
    epochs = list(reads.as_numpy_iterator())
    first, second = epochs[:n], epochs[n:]
    for epoch in (first, second):
        assert collections.Counter((tuple(s), tuple(t)) for s, t in epoch) == whole
    assert [tuple(s) for s, _ in first] != [tuple(s) for s, _ in second]  # new file order


def test_the_seed_moves_the_training_order_but_not_the_validation_sample(split):
    """A warm start moves hparams.seed on (warm_start.continued_hparams) so that it does not
    replay its base's batches; the validation sample stays the same pairs, so the runs of a
    chain report comparable losses."""
    pattern, output = split
    small = dataclasses.replace(HPARAMS, batch_tokens=64)
    one, two = (dataclasses.replace(small, seed=seed) for seed in (0, 1))

    def first_batches(hparams):
        return [labels.numpy().tolist() for _, labels in
                input_pipeline.make_dataset(pattern, output, hparams, training=True).take(3)]

    assert first_batches(one) != first_batches(two)
    assert first_batches(one) == first_batches(one)  # the seed alone decides it

    def validation(hparams):
        return sorted(tuple(row) for _, labels in input_pipeline.validation_dataset(
            pattern, output, hparams, num_pairs=50) for row in labels.numpy().tolist())

    assert validation(one) == validation(two)
