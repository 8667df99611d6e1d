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
from typing import Callable, Iterable

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner_lib

from transform_module.tokens import DEFAULT_WORDPIECE_MAX_WORDS, DEFAULT_WORDPIECE_MIN_COUNT

_LOG = logging.getLogger(__name__)

WORDPIECE_JOINER = "##"  # marks a piece that continues a word


def wordpiece_vocabularies(words: dict[str, tf.Tensor], vocab_size: int,
                           min_count: int = DEFAULT_WORDPIECE_MIN_COUNT,
                           max_words: int = DEFAULT_WORDPIECE_MAX_WORDS) -> dict[str, tf.Tensor]:
    """A custom Transform analyzer: for each vocabulary name, counts every word [N] of the data
    set, learns a WordPiece vocabulary of at most `vocab_size` pieces from the `max_words` most
    frequent words (tensorflow-text's learner, the one BERT's vocabularies come from) and
    returns the path of its file (an asset). The vocabularies are learned in one Beam stage,
    one element each, so a runner with several workers learns them at once."""
    names = list(words)
    paths = tft.experimental.ptransform_analyzer(
        inputs=[words[name] for name in names],
        ptransform=_LearnWordpiece(names, vocab_size, min_count, max_words),
        output_dtypes=[tf.string] * len(names), output_shapes=[[]] * len(names),
        output_asset_default_values=[b"[UNK]"] * len(names),
        name="_".join(names) + "_wordpiece")
    return dict(zip(names, paths))


class _LearnWordpiece(tft_beam.experimental.PTransformAnalyzer):
    """PCollection of batches ([words] per vocabulary) -> one PCollection per vocabulary, of
    one element: its file's path.

    Nothing here funnels the corpus through one worker: words are counted per key (each worker
    sums the words it owns), each worker keeps only its `max_words` most frequent before the
    final merge, and the learner, the one single-threaded step, is fed at most `max_words`.
    """

    def __init__(self, names: list[str], vocab_size: int, min_count: int, max_words: int
                 ) -> None:
        super().__init__()
        self.names, self.vocab_size = names, vocab_size
        self.min_count, self.max_words = min_count, max_words

    def expand(self, batches: beam.PCollection) -> tuple[beam.PCollection, ...]:
        bounded = {}
        for index, name in enumerate(self.names):
            counts = (batches
                      | f"CountPerBatch[{name}]" >> beam.FlatMap(
                          lambda batch, i=index: collections.Counter(batch[i]).items())
                      | f"CountPerWord[{name}]" >> beam.CombinePerKey(sum))
            bounded[name] = (
                counts | f"MostFrequent[{name}]" >> beam.combiners.Top.Of(self.max_words,
                                                                          key=_frequency),
                counts | f"CountDistinct[{name}]" >> beam.combiners.Count.Globally())
        return learn_each(bounded, self._learn)

    def _learn(self, name: str, counts: list[tuple[bytes, int]], distinct: int
               ) -> tuple[bytes]:
        start = time.monotonic()
        pieces = learn_wordpiece(counts, self.vocab_size, self.min_count)
        dropped = (f" (the {len(counts):,} most frequent of {distinct:,}: wordpiece_max_words)"
                   if distinct > len(counts) else "")
        _LOG.info("Learned %s: %d WordPiece pieces from %s distinct words%s in %.0f s.",
                  name, len(pieces), f"{len(counts):,}", dropped, time.monotonic() - start)
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, name)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("".join(p + "\n" for p in pieces))
        return (path.encode(),)


def learn_each(bounded: dict[str, tuple[beam.PCollection, beam.PCollection]],
               learn: Callable[..., tuple[bytes, ...]], paths: int = 1
               ) -> tuple[beam.PCollection, ...]:
    """One Beam stage that learns every vocabulary: `bounded` holds, by name, a PCollection of
    one element (what its learner is given, bounded in size) and one of the count it was chosen
    from. `learn(name, element, count)` returns the `paths` paths of the files it wrote; they
    come out as PCollections of one element each, name by name. The elements are reshuffled
    into that stage together, so a runner with several workers (Beam's multi_processing
    DirectRunner, Dataflow) learns the vocabularies at once, not one after the other."""
    inputs = [sample | f"Name[{name}]" >> beam.Map(lambda s, c, n=name: (n, s, c),
                                                   c=beam.pvalue.AsSingleton(count))
              for name, (sample, count) in bounded.items()]
    learned = (inputs
               | "AllVocabularies" >> beam.Flatten()
               | "OnePerWorker" >> beam.Reshuffle()
               | "Learn" >> beam.Map(lambda element: (element[0], learn(*element))))
    outputs = []
    for name in bounded:
        mine = learned | f"Learned[{name}]" >> beam.Filter(lambda result, n=name: result[0] == n)
        outputs.extend(mine | f"Path{j}[{name}]" >> beam.Map(lambda result, k=j: np.array(
            result[1][k])) for j in range(paths))
    return tuple(outputs)


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
