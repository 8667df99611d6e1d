"""Transform's WordPiece analyzer: learns the vocabulary that preprocessing.py applies in-graph.

tf.Transform has no WordPiece analyzer, so this one wraps tensorflow-text's learner. The learner
is pure Python on one worker: the words are counted per key across the workers, and it is fed
only the `wordpiece_max_words` most frequent, which bounds its time and memory whatever the
corpus (docs/scaling.md).
"""
from __future__ import annotations

import collections
import logging
import os
import time
from typing import Iterable

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner_lib

from transform_module.tokens import DEFAULT_WORDPIECE_MAX_WORDS, DEFAULT_WORDPIECE_MIN_COUNT

_LOG = logging.getLogger(__name__)

WORDPIECE_JOINER = "##"  # marks a piece that continues a word


def wordpiece_vocabulary(words: tf.Tensor, vocab_size: int, vocab_name: str,
                         min_count: int = DEFAULT_WORDPIECE_MIN_COUNT,
                         max_words: int = DEFAULT_WORDPIECE_MAX_WORDS) -> tf.Tensor:
    """A custom Transform analyzer: counts every word [N] of the data set, learns a WordPiece
    vocabulary of at most `vocab_size` pieces from the `max_words` most frequent words
    (tensorflow-text's learner, the one BERT's vocabularies come from) and returns the path of
    the vocab file (an asset)."""
    (path,) = tft.experimental.ptransform_analyzer(
        inputs=[words],
        ptransform=_LearnWordpiece(vocab_size, vocab_name, min_count, max_words),
        output_dtypes=[tf.string], output_shapes=[[]],
        output_asset_default_values=[b"[UNK]"], name=f"{vocab_name}_wordpiece")
    return path


class _LearnWordpiece(tft_beam.experimental.PTransformAnalyzer):
    """PCollection of [words] batches -> one element: the learned vocabulary file's path.

    Nothing here funnels the corpus through one worker: words are counted per key (each worker
    sums the words it owns), each worker keeps only its `max_words` most frequent before the
    final merge, and the learner, the one single-threaded step, is fed at most `max_words`.
    """

    def __init__(self, vocab_size: int, vocab_name: str, min_count: int, max_words: int
                 ) -> None:
        super().__init__()
        self.vocab_size, self.vocab_name = vocab_size, vocab_name
        self.min_count, self.max_words = min_count, max_words

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        counts = (batches
                  | "CountPerBatch" >> beam.FlatMap(
                      lambda batch: collections.Counter(batch[0]).items())
                  | "CountPerWord" >> beam.CombinePerKey(sum))
        distinct = counts | "CountDistinct" >> beam.combiners.Count.Globally()
        return (counts
                | "MostFrequent" >> beam.combiners.Top.Of(self.max_words, key=_frequency)
                | "Learn" >> beam.Map(self._learn, distinct=beam.pvalue.AsSingleton(distinct)))

    def _learn(self, counts: list[tuple[bytes, int]], distinct: int) -> np.ndarray:
        start = time.monotonic()
        pieces = learn_wordpiece(counts, self.vocab_size, self.min_count)
        dropped = (f" (the {len(counts):,} most frequent of {distinct:,}: wordpiece_max_words)"
                   if distinct > len(counts) else "")
        _LOG.info("Learned %s: %d WordPiece pieces from %s distinct words%s in %.0f s.",
                  self.vocab_name, len(pieces), f"{len(counts):,}", dropped,
                  time.monotonic() - start)
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, self.vocab_name)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("".join(p + "\n" for p in pieces))
        return np.array(path.encode())


def _frequency(word_count: tuple[bytes, int]) -> tuple[int, bytes]:
    """Top's order: by count, ties by the word itself, so the kept words never depend on how
    the runner bundled the data."""
    word, count = word_count
    return count, word


def learn_wordpiece(counts: Iterable[tuple[bytes, int]], vocab_size: int,
                    min_count: int = DEFAULT_WORDPIECE_MIN_COUNT) -> list[str]:
    """(word (bytes), count) pairs -> at most `vocab_size` pieces: every character seen (alone
    and as a "##" continuation) plus the most useful longer pieces seen at least `min_count`
    times, so any word made of seen characters can be spelled. The reserved tokens are not in
    the file (ids put them first). The learner orders pieces by count, then alphabetically, so
    the order of `counts` does not matter."""
    words = [(w.decode(), c) for w, c in counts if w]
    pieces = learn_pieces(words, vocab_size, min_count)
    # The learner overshoots vocab_size when its threshold search stops at min_count (e.g. 8,139
    # English pieces at min count 3): drop the rarest longer pieces (the list is characters, then
    # pieces by count), never a character, so every word stays spellable.
    longer = [p for p in pieces if len(p.removeprefix(WORDPIECE_JOINER)) > 1]
    rarest = set(longer[len(longer) - max(0, len(pieces) - vocab_size):])
    return [p for p in pieces if p not in rarest]


def learn_pieces(words: list[tuple[str, int]], vocab_size: int, min_count: int) -> list[str]:
    """tensorflow-text's `learner_lib.learn` with its defaults, whose result this is, but
    without its threshold search where that search cannot succeed.

    The learner binary-searches the count threshold whose vocabulary is within 5 % below
    `vocab_size`. When even `min_count`, the lowest threshold, gives fewer pieces than that
    (fra.txt's words give about 4,200 and 6,800 of 8,000), every threshold it tries gives fewer
    still (a higher threshold admits fewer pieces), so each of its dozen learnings only moves
    the upper bound down: here the bounds are moved without learning, and the vocabulary is
    learned once, at the threshold the search would end on (BENCHMARKS.md, "WordPiece
    learning without a search that cannot succeed").
    """
    params = learner_lib.Params(
        upper_thresh=int(1e7), lower_thresh=min_count, num_iterations=4,
        max_input_tokens=5_000_000, max_token_length=50, max_unique_chars=1000,
        vocab_size=vocab_size, slack_ratio=0.05, include_joiner_token=True,
        joiner=WORDPIECE_JOINER, reserved_tokens=[])
    upper, lower = learner_lib.get_search_threshs(words, params.upper_thresh, params.lower_thresh)
    all_counts = learner_lib.get_input_words(words, params.reserved_tokens,
                                             params.max_token_length)
    allowed_chars = learner_lib.get_allowed_chars(all_counts, params.max_unique_chars)
    counts = learner_lib.filter_input_words(all_counts, allowed_chars, params.max_input_tokens)
    at_lowest = learner_lib.learn_with_thresh(counts, lower, params)
    if vocab_size - len(at_lowest) <= params.slack_ratio * vocab_size:  # it can succeed
        return learner_lib.learn_binary_search(counts, lower, upper, params)
    thresh = (upper + lower) // 2  # learn_binary_search's steps when every vocabulary is short
    while lower < upper and thresh > 1:
        upper = thresh - 1
        thresh = (upper + lower) // 2
    return at_lowest if thresh == lower else learner_lib.learn_with_thresh(counts, thresh, params)
