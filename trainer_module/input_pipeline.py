"""tf.data input: Transform's output -> length-bucketed batches of (English, French) pairs.

Distributed training (see task.py) builds one training dataset per worker with
`make_dataset(..., shard=(num_workers, worker_index))`. Each worker reads its own files of
Transform's output (file-level sharding; Transform writes one file per Beam bundle, so a
distributed runner writes many), several at once, and parses batches in parallel. Each replica
takes whole batches of `batch_tokens` tokens, so N replicas train N x batch_tokens per step.

The shuffle: each epoch reads the worker's files in a new order, interleaving
`_PARALLEL_FILES` of them, and draws pairs from a buffer of `hparams.shuffle_pairs`. The
pairs are cached in memory only when the worker's share fits `hparams.cache_megabytes`;
otherwise every epoch reads and parses the files again (nothing unbounded is held). After the
cache come what must change from epoch to epoch: the order, the pieces of each sentence
(`resample_pieces`, when hparams.subword_alpha asks for it) and the pairs joined.
"""
from __future__ import annotations

import logging
from typing import Sequence

import tensorflow as tf
import tensorflow_text as text
import tensorflow_transform as tft

from trainer_module.hparams import HParams
from transform_module.preprocessing import SOURCE_IDS, SOURCE_VOCAB, TARGET_IDS, TARGET_VOCAB
from transform_module.sentencepiece import MODEL_SUFFIX
from transform_module.tokens import END_ID, PAD_ID, START_ID

_LOG = logging.getLogger(__name__)

_READ_BATCH = 1024  # examples parsed at once before expanding to pairs
_PARALLEL_FILES = 8  # files read at once (interleaved) by one worker
# Cached pairs take about this many bytes of memory per byte of Transform's gzip output
# (int32 ids plus tf.data's per-element overhead; BENCHMARKS.md, "Training input").
CACHE_BYTES_PER_FILE_BYTE = 20
_DRAWS = 1_000_000  # join_pairs: the resolution of its join-or-not draw
_RESAMPLE_BATCH = 256  # pairs cut into pieces anew at once (resample_pieces)
# Subword regularization draws each segmentation from the 64 best (Kudo 2018's l=64): drawing
# from all of them cuts fra.txt's words into far more pieces at the same alpha.
_SAMPLED_SEGMENTATIONS = 64
_EVAL_SHUFFLE_PAIRS = 100_000  # more than the eval split has: the sample spans all of it
VALIDATION_PAIRS = 2_000  # the fixed random sample of the eval split behind "validation loss"
# Its seed: not hparams.seed, which a warm start moves on, so runs of a chain report losses on
# the same sample.
_VALIDATION_SEED = 0
# Padded lengths of the buckets; batches hold ~batch_tokens tokens whatever the bucket.
BUCKET_BOUNDARIES = (8, 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256)

Pair = tuple[tuple[tf.Tensor, tf.Tensor], tf.Tensor]  # ((source, target_in), target_out)


def match_files(file_pattern: str | Sequence[str]) -> list[str]:
    """The sorted files of one or more patterns; an error names the patterns if none match.

    Directories are skipped: a Beam job that a runner restarted (Flink after a lost
    TaskManager) can leave its killed attempt's `beam-temp-*` directory beside the files.
    """
    patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
    files = sorted(f for pattern in patterns for f in tf.io.gfile.glob(pattern)
                   if not tf.io.gfile.isdir(f))
    if not files:
        raise FileNotFoundError(f"No transformed examples match {file_pattern!r}.")
    return files


def worker_files(files: list[str], shard: tuple[int, int]) -> tuple[list[str], tuple[int, int]]:
    """Worker i of n reads files i, i+n, ... (disjoint, their union all files), and keeps every
    record: returns (its files, (1, 0)). With fewer files than workers, every worker reads all
    files and keeps every n-th example: returns (files, shard)."""
    num_workers, index = shard
    if len(files) >= num_workers:
        return files[index::num_workers], (1, 0)
    _LOG.warning("Transform wrote %d file(s) for %d training workers: each worker reads all "
                 "of them and keeps every %d-th example. A distributed Beam runner writes one "
                 "file per bundle.", len(files), num_workers, num_workers)
    return files, shard


def read_pairs(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
               hparams: HParams, shard: tuple[int, int] = (1, 0),
               file_order_seed: int | None = None) -> tf.data.Dataset:
    """One (source_ids [S], target_ids [T]) per French reference, too-long pairs dropped.

    shard=(n, i): this worker's share (`worker_files`); all references of an example stay
    together. file_order_seed: None reads the files in order; else in a new order each epoch.
    """
    files, record_shard = worker_files(match_files(file_pattern), shard)
    return _read_files(files, record_shard, tf_transform_output, hparams, file_order_seed)


def _read_files(files: list[str], record_shard: tuple[int, int],
                tf_transform_output: tft.TFTransformOutput, hparams: HParams,
                file_order_seed: int | None) -> tf.data.Dataset:
    """`read_pairs` on one worker's files, as `worker_files` gave them."""
    spec = {k: v for k, v in tf_transform_output.transformed_feature_spec().items()
            if k in (SOURCE_IDS, TARGET_IDS)}

    def expand(serialized: tf.Tensor):
        features = tf.io.parse_example(serialized, spec)
        targets = features[TARGET_IDS]  # [b, (R), (T)]
        sources = tf.gather(features[SOURCE_IDS], targets.value_rowids())  # one per reference
        return sources, targets.values

    names = tf.data.Dataset.from_tensor_slices(files)
    if file_order_seed is not None:
        names = names.shuffle(len(files), seed=file_order_seed, reshuffle_each_iteration=True)
    return (names
            .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                        cycle_length=min(len(files), _PARALLEL_FILES),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .shard(*record_shard)
            .batch(_READ_BATCH)
            .map(expand, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch()
            .map(lambda s, t: (tf.cast(s, tf.int32), tf.cast(t, tf.int32)))
            .filter(lambda s, t: _fits(s, t, hparams)))


def _fits(source: tf.Tensor, target: tf.Tensor, hparams: HParams) -> tf.Tensor:
    """Whether a pair has tokens on both sides and no more than the model's lengths."""
    return ((tf.size(source) <= hparams.max_source_length)
            & (tf.size(target) <= hparams.max_target_length)
            & (tf.size(source) > 0) & (tf.size(target) > 0))


def sentencepiece_model(tf_transform_output: tft.TFTransformOutput) -> bytes:
    """The serialized SentencePiece model Transform learned, shared by both sides (an error
    says so if Transform used another tokenizer or one vocabulary per language)."""
    source, target = (tf_transform_output.vocabulary_file_by_name(name)
                      for name in (SOURCE_VOCAB, TARGET_VOCAB))
    path = source + MODEL_SUFFIX
    if source != target or not tf.io.gfile.exists(path):
        raise ValueError(f"subword_alpha needs one SentencePiece model for both languages "
                         f"(Transform's tokenizer=sentencepiece, joint_vocabulary); found no "
                         f"{path!r} shared by both sides")
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def resample_pieces(pairs: tf.data.Dataset, model: bytes, hparams: HParams
                    ) -> tf.data.Dataset:
    """Subword regularization: every (source_ids, target_ids) pair spelled back into its
    (normalized) sentences and cut into pieces anew, a segmentation drawn at random
    (hparams.subword_alpha, `_SAMPLED_SEGMENTATIONS`) each time the pair passes. A pair the
    new pieces make too long for the model is dropped, as `read_pairs` drops one."""
    tokenizer = text.SentencepieceTokenizer(model=model, nbest_size=_SAMPLED_SEGMENTATIONS,
                                            alpha=hparams.subword_alpha)

    def resample(ids: tf.RaggedTensor) -> tf.RaggedTensor:  # [b, (T)] -> [b, (T')]
        return tokenizer.tokenize(tokenizer.detokenize(ids))

    return (pairs
            .ragged_batch(_RESAMPLE_BATCH)
            .map(lambda s, t: (resample(s), resample(t)), num_parallel_calls=tf.data.AUTOTUNE)
            .unbatch()
            .filter(lambda s, t: _fits(s, t, hparams)))


def fits_in_cache(files: list[str], hparams: HParams) -> bool:
    """Whether the pairs of `files` are estimated to fit `hparams.cache_megabytes` in memory."""
    file_bytes = sum(tf.io.gfile.stat(f).length for f in files)
    return file_bytes * CACHE_BYTES_PER_FILE_BYTE <= hparams.cache_megabytes * 2**20


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


def _leading_within(rows: tf.RaggedTensor, limit: int) -> tf.Tensor:
    """How many of the first rows, together, have at most `limit` values (int32)."""
    return tf.reduce_sum(tf.cast(tf.cumsum(rows.row_lengths()) <= limit, tf.int32))


def join_pairs(pairs: tf.data.Dataset, hparams: HParams, seed: int) -> tf.data.Dataset:
    """Consecutive pairs in windows of `hparams.max_pairs_joined`; in `hparams.joined_pairs`
    of the windows the first n pairs are joined into one example (n drawn from 2 to
    max_pairs_joined), each source after the one before, each target after the one before,
    the rest stay alone. n is cut to the pairs that fit max_source_length and
    max_target_length together; no pair is lost either way.

    Every fra.txt pair is one short sentence; joined ones show the model longer inputs, whose
    translation a model trained on short ones alone breaks down on (sentence length acts as a
    domain: Varis and Bojar 2021; joining pairs helps: Nguyen et al. 2021).
    """
    window = hparams.max_pairs_joined

    def split_or_join(pairs_: Pair, draw: tf.Tensor) -> tf.data.Dataset:
        sources, targets = pairs_  # [1..window, (length)] ragged
        wanted = 2 + tf.cast(draw // _DRAWS % (window - 1), tf.int32)
        n = tf.minimum(wanted, tf.minimum(_leading_within(sources, hparams.max_source_length),
                                          _leading_within(targets, hparams.max_target_length)))
        join = (n >= 2) & (tf.cast(draw % _DRAWS, tf.float32) / _DRAWS < hparams.joined_pairs)

        def rows(ragged: tf.RaggedTensor) -> tf.RaggedTensor:
            lengths = ragged.row_lengths()
            joined = tf.concat([tf.reduce_sum(lengths[:n], keepdims=True), lengths[n:]], 0)
            return tf.RaggedTensor.from_row_lengths(
                ragged.flat_values, tf.cond(join, lambda: joined, lambda: lengths))

        return tf.data.Dataset.from_tensor_slices((rows(sources), rows(targets)))

    # One random int64 per window: its low digits decide whether to join, the rest how many.
    draws = tf.data.Dataset.random(seed=seed)
    # The rows of a ragged batch come out as plain tensors, but their spec still says ragged
    # (ragged_rank 0), which padded batching refuses: passing them through a map fixes the spec.
    return (tf.data.Dataset.zip((pairs.ragged_batch(window), draws))
            .flat_map(split_or_join)
            .map(lambda source, target: (source, target)))


def make_dataset(file_pattern: str | Sequence[str], tf_transform_output: tft.TFTransformOutput,
                 hparams: HParams, training: bool, bucketing: bool | None = None,
                 seed: int | None = None, shard: tuple[int, int] = (1, 0),
                 pad_to_boundary: bool | None = None) -> tf.data.Dataset:
    """Training: shuffled (seed: None = hparams.seed), repeated forever, cached in memory if
    the worker's share fits `hparams.cache_megabytes`. Evaluation: one ordered pass.

    bucketing: None follows hparams.bucketing. shard: see `read_pairs`. pad_to_boundary: see
    `batch_pairs`."""
    seed = hparams.seed if seed is None else seed
    if not training:
        pairs = read_pairs(file_pattern, tf_transform_output, hparams, shard)
    else:
        files, record_shard = worker_files(match_files(file_pattern), shard)
        cache = fits_in_cache(files, hparams)
        # A cached dataset keeps its first epoch's file order; its shuffle buffer does the rest.
        pairs = _read_files(files, record_shard, tf_transform_output, hparams,
                            file_order_seed=None if cache else seed)
        if cache:
            pairs = pairs.cache()
        else:
            _LOG.info("The training pairs of %d file(s) do not fit the %s MB cache "
                      "(cache_megabytes): each epoch reads them again.", len(files),
                      f"{hparams.cache_megabytes:,}")
        pairs = training_order(pairs, hparams, seed)
        if hparams.subword_alpha:
            pairs = resample_pieces(pairs, sentencepiece_model(tf_transform_output), hparams)
        if hparams.joined_pairs:
            pairs = join_pairs(pairs, hparams, seed)
    bucketing = hparams.bucketing if bucketing is None else bucketing
    return batch_pairs(pairs, hparams, bucketing, pad_to_boundary=pad_to_boundary).prefetch(
        tf.data.AUTOTUNE)


def validation_dataset(file_pattern: str | Sequence[str],
                       tf_transform_output: tft.TFTransformOutput, hparams: HParams,
                       num_pairs: int = VALIDATION_PAIRS) -> tf.data.Dataset:
    """A fixed random sample of the eval split's pairs, batched like training, in memory.

    Sampled over the whole split (the files are sorted by length, so their first pairs are the
    shortest); the same sample every epoch and run, so validation losses compare across
    checkpoints and the runs of a chain. Every worker evaluates all of it (auto-sharding off).
    """
    pairs = (read_pairs(file_pattern, tf_transform_output, hparams)
             .shuffle(_EVAL_SHUFFLE_PAIRS, seed=_VALIDATION_SEED, reshuffle_each_iteration=False)
             .take(num_pairs))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batch_pairs(pairs, hparams, hparams.bucketing).cache().with_options(options)
