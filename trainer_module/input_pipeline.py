"""tf.data input: Transform's output -> length-bucketed batches of (English, French) pairs.

Distributed training (see task.py) builds one training dataset per worker with
`make_dataset(..., shard=(num_workers, worker_index))`: workers read disjoint slices of the
examples, shuffle them with the same seed, and each replica takes whole batches of
`batch_tokens` tokens, so N replicas train N x batch_tokens per step.
"""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module.hparams import HParams
from trainer_module.preprocessing import SOURCE_IDS, TARGET_IDS
from trainer_module.tokens import END_ID, PAD_ID, START_ID

_READ_BATCH = 1024  # examples parsed at once before expanding to pairs
_EVAL_SHUFFLE_PAIRS = 100_000  # more than the eval split has: the sample spans all of it
VALIDATION_PAIRS = 2_000  # the fixed random sample of the eval split behind "validation loss"
# Padded lengths of the buckets; batches hold ~batch_tokens tokens whatever the bucket.
BUCKET_BOUNDARIES = (8, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)

Pair = tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]  # ((source, target_in), target_out)


def read_pairs(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
               hparams: HParams, shard: tuple[int, int] = (1, 0)) -> tf.data.Dataset:
    """One (source_ids [S], target_ids [T]) per French reference, too-long pairs dropped.

    shard=(n, i) keeps every n-th example starting at the i-th (all references of an example
    stay together), so n workers read disjoint parts whatever the number of files.
    """
    files = tf.io.gfile.glob(file_pattern) if isinstance(file_pattern, str) else [
        f for pattern in file_pattern for f in tf.io.gfile.glob(pattern)]
    if not files:
        raise FileNotFoundError(f"No transformed examples match {file_pattern!r}.")
    spec = {k: v for k, v in tf_transform_output.transformed_feature_spec().items()
            if k in (SOURCE_IDS, TARGET_IDS)}

    def expand(serialized: tf.Tensor):
        features = tf.io.parse_example(serialized, spec)
        targets = features[TARGET_IDS]  # [b, (R), (T)]
        sources = tf.gather(features[SOURCE_IDS], targets.value_rowids())  # one per reference
        return tf.data.Dataset.from_tensor_slices((sources, targets.values))

    def fits(source: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
        return ((tf.size(source) <= hparams.max_source_length)
                & (tf.size(target) <= hparams.max_target_length)
                & (tf.size(source) > 0) & (tf.size(target) > 0))

    return (tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")
            .shard(*shard)
            .batch(_READ_BATCH)
            .flat_map(expand)
            .map(lambda s, t: (tf.cast(s, tf.int32), tf.cast(t, tf.int32)))
            .filter(fits))


def to_model_inputs(source: tf.Tensor, target: tf.Tensor) -> Pair:
    """Teacher forcing: decoder reads [start] + target and predicts target + [end]."""
    target_in = tf.concat([[START_ID], target], axis=0)
    target_out = tf.concat([target, [END_ID]], axis=0)
    return (source, target_in), target_out


def _pair_length(inputs, target_out) -> tf.Tensor:
    source, _ = inputs
    return tf.maximum(tf.size(source), tf.size(target_out))


def bucket_lengths(hparams: HParams) -> list[int]:
    """Padded lengths of the length buckets, the last one the longest pair allowed."""
    longest = max(hparams.max_source_length, hparams.max_target_length + 1)
    return [b for b in BUCKET_BOUNDARIES if b < longest] + [longest]


def batch_pairs(pairs: tf.data.Dataset, hparams: HParams, bucketing: bool = True,
                pad_to: int | None = None, pad_to_boundary: bool | None = None
                ) -> tf.data.Dataset:
    """Batches of ~hparams.batch_tokens tokens.

    bucketing=True groups pairs of similar length. Without XLA each batch is padded only to its
    longest pair (dynamic padding); with XLA (hparams.use_xla) to its bucket's length, so there
    is one batch shape per bucket and XLA compiles a handful of programs instead of one per
    batch (pad_to_boundary: None follows hparams.use_xla). bucketing=False pads every pair to
    `pad_to` (the seeds' way, for benchmarks).
    """
    pairs = pairs.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    if not bucketing:
        length = pad_to or max(hparams.max_source_length, hparams.max_target_length + 1)
        return pairs.padded_batch(max(1, hparams.batch_tokens // length),
                                  padded_shapes=(([length], [length]), [length]),
                                  padding_values=PAD_ID, drop_remainder=True)
    lengths = bucket_lengths(hparams)
    sizes = [max(1, hparams.batch_tokens // b) for b in lengths]
    # bucket_by_sequence_length has one bucket more than boundaries (pairs longer than the
    # last one); `read_pairs` drops those, so it stays empty.
    return pairs.bucket_by_sequence_length(
        _pair_length, bucket_boundaries=[b + 1 for b in lengths],
        bucket_batch_sizes=sizes + sizes[-1:], padding_values=PAD_ID,
        pad_to_bucket_boundary=hparams.use_xla if pad_to_boundary is None else pad_to_boundary)


def training_order(pairs: tf.data.Dataset, hparams: HParams, seed: int | None = None
                   ) -> tf.data.Dataset:
    """The pairs in a new random order every epoch, forever (seed: None = hparams.seed).

    ExampleGen's output follows fra.txt, which is sorted by length: a shuffle buffer smaller
    than the split would make every epoch run from short to long sentences.
    """
    return pairs.shuffle(hparams.shuffle_pairs, seed=hparams.seed if seed is None else seed,
                         reshuffle_each_iteration=True).repeat()


def make_dataset(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
                 hparams: HParams, training: bool, bucketing: bool | None = None,
                 seed: int | None = None, shard: tuple[int, int] = (1, 0),
                 pad_to_boundary: bool | None = None) -> tf.data.Dataset:
    """Training: cached, shuffled (hparams.shuffle_pairs, seed hparams.seed), repeated forever.
    Evaluation: one ordered pass.

    bucketing: None follows hparams.bucketing. shard: see `read_pairs`. pad_to_boundary: see
    `batch_pairs`."""
    pairs = read_pairs(file_pattern, tf_transform_output, hparams, shard).cache()
    if training:
        pairs = training_order(pairs, hparams, seed)
    bucketing = hparams.bucketing if bucketing is None else bucketing
    return batch_pairs(pairs, hparams, bucketing, pad_to_boundary=pad_to_boundary).prefetch(
        tf.data.AUTOTUNE)


def validation_dataset(file_pattern: str | Sequence[str],
                       tf_transform_output: tft.TFTransformOutput, hparams: HParams,
                       num_pairs: int = VALIDATION_PAIRS) -> tf.data.Dataset:
    """A fixed random sample of the eval split's pairs, batched like training, in memory.

    Sampled over the whole split (the files are sorted by length, so their first pairs are the
    shortest); the same sample every epoch, so validation losses compare across checkpoints.
    Every worker evaluates all of it (auto-sharding off).
    """
    pairs = (read_pairs(file_pattern, tf_transform_output, hparams)
             .shuffle(_EVAL_SHUFFLE_PAIRS, seed=hparams.seed, reshuffle_each_iteration=False)
             .take(num_pairs))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batch_pairs(pairs, hparams, hparams.bucketing).cache().with_options(options)
