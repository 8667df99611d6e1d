"""tf.data input: Transform's output -> length-bucketed batches of (English, French) pairs."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf
import tensorflow_transform as tft

from trainer_module.hparams import END_ID, PAD_ID, START_ID, HParams
from trainer_module.preprocessing import SOURCE_IDS, TARGET_IDS

_READ_BATCH = 1024  # examples parsed at once before expanding to pairs
_SHUFFLE_PAIRS = 50_000
# Padded lengths of the buckets; batches hold ~batch_tokens tokens whatever the bucket.
BUCKET_BOUNDARIES = (8, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)

Pair = tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]  # ((source, target_in), target_out)


def read_pairs(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
               hparams: HParams) -> tf.data.Dataset:
    """One (source_ids [S], target_ids [T]) per French reference, too-long pairs dropped."""
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


def batch_pairs(pairs: tf.data.Dataset, hparams: HParams, bucketing: bool = True,
                pad_to: int | None = None) -> tf.data.Dataset:
    """Batches of ~hparams.batch_tokens tokens.

    bucketing=True groups pairs of similar length and pads each batch only to its longest
    pair (dynamic padding); False pads every pair to `pad_to` (the seeds' way, for benchmarks).
    """
    pairs = pairs.map(to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE)
    if not bucketing:
        length = pad_to or max(hparams.max_source_length, hparams.max_target_length + 1)
        return pairs.padded_batch(max(1, hparams.batch_tokens // length),
                                  padded_shapes=(([length], [length]), [length]),
                                  padding_values=PAD_ID, drop_remainder=True)
    boundaries = [b for b in BUCKET_BOUNDARIES
                  if b <= max(hparams.max_source_length, hparams.max_target_length + 1)]
    sizes = [max(1, hparams.batch_tokens // b) for b in boundaries]
    sizes.append(max(1, hparams.batch_tokens // (boundaries[-1] * 2)))
    return pairs.bucket_by_sequence_length(
        _pair_length, bucket_boundaries=[b + 1 for b in boundaries],
        bucket_batch_sizes=sizes, padding_values=PAD_ID)


def make_dataset(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
                 hparams: HParams, training: bool, bucketing: bool | None = None,
                 seed: int | None = None) -> tf.data.Dataset:
    """Training: cached, shuffled, repeated forever. Evaluation: one ordered pass.

    bucketing: None follows hparams.bucketing."""
    pairs = read_pairs(file_pattern, tf_transform_output, hparams).cache()
    if training:
        pairs = pairs.shuffle(_SHUFFLE_PAIRS, seed=seed, reshuffle_each_iteration=True).repeat()
    bucketing = hparams.bucketing if bucketing is None else bucketing
    return batch_pairs(pairs, hparams, bucketing).prefetch(tf.data.AUTOTUNE)
