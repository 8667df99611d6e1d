"""Transform's preprocessing_fn: normalize, tokenize and map words to ids, all in the graph.

The same graph runs in Transform (training data) and inside the exported SavedModel (serving),
so there is no training/serving skew. Only long-standing TF and tensorflow-text ops are used
(TF Serving embeds tensorflow-text 2.12).
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
import time
from typing import Any, Iterable

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_text as text
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as wordpiece

from trainer_module.hparams import (DEFAULT_TOKENIZER, END_ID, PAD_ID, START_ID, TOKENIZERS,
                                    UNK_ID)

_LOG = logging.getLogger(__name__)

# Raw features (from ExampleGen) and transformed features (to the Trainer / TFMA).
ENGLISH, FRENCH = "english", "french"
SOURCE_IDS, TARGET_IDS = "source_ids", "target_ids"
LENGTH_BUCKET = "english_length_bucket"
SOURCE_VOCAB, TARGET_VOCAB = "english_vocab", "french_vocab"

RESERVED_TOKENS = ("[pad]", "[UNK]", "[start]", "[end]")
assert [RESERVED_TOKENS.index(t) for t in RESERVED_TOKENS] == [PAD_ID, UNK_ID, START_ID, END_ID]

# English length buckets (in whitespace-separated words of the raw sentence) for TFMA slices.
LENGTH_BUCKETS = ((1, 5, "01-05"), (6, 10, "06-10"), (11, 20, "11-20"), (21, None, "21+"))

DEFAULT_VOCAB_SIZE = 8000
DEFAULT_FREQUENCY_THRESHOLD = 2
WORDPIECE_JOINER = "##"  # marks a piece that continues a word

_WORD = r"\pL\pN\pM_"  # RE2's \w is ASCII-only: use Unicode letter/number/mark classes
_EDGE_MARKS = "'’-"  # kept inside words (aujourd'hui, peut-être), split at token edges


def normalize(sentences: tf.Tensor) -> tf.Tensor:
    """NFKC, control and format characters removed, punctuation split off words, whitespace collapsed;
    case kept.

    RE2 has no lookaround, so "apostrophe/hyphen not followed by a word character" is
    written as explicit token-edge rules.
    """
    x = text.normalize_utf8(sentences, "NFKC")  # also maps (narrow) no-break spaces to spaces
    x = tf.strings.regex_replace(x, r"\p{Cc}", " ")  # control characters separate words
    x = tf.strings.regex_replace(x, r"\p{Cf}", "")  # zero-width/format characters vanish
    x = tf.strings.regex_replace(x, rf"([^{_WORD}\s{_EDGE_MARKS}])", r" \1 ")
    x = tf.strings.regex_replace(x, rf"(^|\s)([{_EDGE_MARKS}]+)", r"\1\2 ")
    x = tf.strings.regex_replace(x, rf"([{_EDGE_MARKS}]+)(\s|$)", r" \1\2")
    x = tf.strings.regex_replace(x, r"\s+", " ")
    return tf.strings.strip(x)


def tokenize(sentences: tf.Tensor) -> tf.RaggedTensor:
    """[...] strings -> [..., (tokens)] words after `normalize`."""
    return tf.strings.split(normalize(sentences))


def length_bucket(sentences: tf.Tensor) -> tf.Tensor:
    """[B] raw English sentences -> [B] bucket names by number of words."""
    words = tf.strings.split(tf.strings.strip(sentences)).row_lengths()
    bucket = tf.fill(tf.shape(words), LENGTH_BUCKETS[-1][2])
    for low, high, name in reversed(LENGTH_BUCKETS[:-1]):
        bucket = tf.where((words >= low) & (words <= high), name, bucket)
    return bucket


def _ids(words: tf.RaggedTensor, vocab_name: str, custom_config: dict[str, Any]
         ) -> tf.RaggedTensor:
    """Words -> ids of the learned vocabulary (most frequent first) shifted past the reserved
    ids; anything not in the vocabulary -> [UNK]. With wordpiece, each word becomes one or more
    pieces, so the innermost ragged dimension counts pieces instead of words."""
    size = int(custom_config.get("vocab_size", DEFAULT_VOCAB_SIZE))
    tokenizer = custom_config.get("tokenizer", DEFAULT_TOKENIZER)
    if tokenizer == "wordpiece":
        vocab = wordpiece_vocabulary(words, size, vocab_name)
        index = tft.apply_vocabulary(words, vocab, lookup_fn=_wordpiece_lookup)
    elif tokenizer == "word":
        vocab = tft.vocabulary(
            words, top_k=size, vocab_filename=vocab_name,
            frequency_threshold=int(custom_config.get("frequency_threshold",
                                                      DEFAULT_FREQUENCY_THRESHOLD)))
        index = tft.apply_vocabulary(words, vocab, default_value=-1)
    else:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; valid: {', '.join(TOKENIZERS)}")
    return tf.ragged.map_flat_values(
        lambda i: tf.where(i < 0, tf.cast(UNK_ID, i.dtype), i + len(RESERVED_TOKENS)), index)


def _wordpiece_lookup(words: tf.RaggedTensor, vocab_file: tf.Tensor
                      ) -> tuple[tf.RaggedTensor, tf.Tensor]:
    """[..., (W)] words -> [..., (P)] piece indices in `vocab_file`, -1 for a word that cannot
    be spelled with the pieces. WordpieceTokenizeWithOffsets is a tf-text 2.0 op, so TF
    Serving (tf-text 2.12) loads it."""
    # Once the file is known (the final trace, as tft.apply_vocabulary does it), build the table
    # outside the function so serving initializes it once, not on every call.
    known = isinstance(vocab_file, (str, bytes)) or not tf.is_symbolic_tensor(vocab_file)
    with tf.init_scope() if tf.inside_function() and known else contextlib.nullcontext():
        table = tf.lookup.StaticHashTable(
            tf.lookup.TextFileInitializer(
                vocab_file, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER),
            default_value=-1)
    tokenizer = text.WordpieceTokenizer(table, suffix_indicator=WORDPIECE_JOINER,
                                        token_out_type=tf.int64, unknown_token=None)
    return tokenizer.tokenize(words).merge_dims(-2, -1), table.size()


def wordpiece_vocabulary(words: tf.RaggedTensor, vocab_size: int, vocab_name: str) -> tf.Tensor:
    """A custom Transform analyzer: counts every word of the data set, learns a WordPiece
    vocabulary of at most `vocab_size` pieces from the counts (tensorflow-text's learner, the
    one BERT's vocabularies come from) and returns the path of the vocab file (an asset)."""
    (path,) = tft.experimental.ptransform_analyzer(
        inputs=[words.flat_values], ptransform=_LearnWordpiece(vocab_size, vocab_name),
        output_dtypes=[tf.string], output_shapes=[[]],
        output_asset_default_values=[b"[UNK]"], name=f"{vocab_name}_wordpiece")
    return path


class _LearnWordpiece(tft_beam.experimental.PTransformAnalyzer):
    """PCollection of [words] batches -> one element: the learned vocabulary file's path."""

    def __init__(self, vocab_size: int, vocab_name: str) -> None:
        super().__init__()
        self.vocab_size, self.vocab_name = vocab_size, vocab_name

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        return (batches
                | "CountPerBatch" >> beam.Map(lambda batch: collections.Counter(batch[0]))
                | "CountAll" >> beam.CombineGlobally(_merge_counters)
                | "Learn" >> beam.Map(self._learn))

    def _learn(self, counts: collections.Counter) -> np.ndarray:
        start = time.monotonic()
        pieces = learn_wordpiece(counts, self.vocab_size)
        _LOG.info("Learned %s: %d WordPiece pieces from %d distinct words in %.0f s.",
                  self.vocab_name, len(pieces), len(counts), time.monotonic() - start)
        tf.io.gfile.makedirs(self.base_temp_dir)
        path = os.path.join(self.base_temp_dir, self.vocab_name)
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("".join(p + "\n" for p in pieces))
        return np.array(path.encode())


def _merge_counters(counters: Iterable[collections.Counter]) -> collections.Counter:
    total = collections.Counter()
    for counter in counters:
        total.update(counter)
    return total


def learn_wordpiece(counts: collections.Counter, vocab_size: int) -> list[str]:
    """Word (bytes) counts -> at most `vocab_size` pieces: every character seen (alone and as a
    "##" continuation) plus the most useful longer pieces, so any word made of seen characters
    can be spelled. The reserved tokens are not in the file (ids put them first)."""
    words = [(w.decode(), c) for w, c in counts.items() if w]
    return wordpiece.learn(words, vocab_size, reserved_tokens=[], joiner=WORDPIECE_JOINER)


def preprocessing_fn(inputs: dict[str, Any], custom_config: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    """english [B] -> source_ids [B, (S)]; french [B, (R)] -> target_ids [B, (R), (T)].

    Each example keeps all its French references (ragged); the Trainer expands them into one
    training pair per reference.
    """
    custom_config = custom_config or {}
    english = tf.reshape(_dense(inputs[ENGLISH]), [-1])
    outputs = {
        SOURCE_IDS: _ids(tokenize(english), SOURCE_VOCAB, custom_config),
        LENGTH_BUCKET: length_bucket(english),
    }
    if FRENCH in inputs:  # absent at serving time: only English comes in
        references = _ragged(inputs[FRENCH])  # [B, (R)]
        outputs[TARGET_IDS] = _ids(tokenize(references), TARGET_VOCAB, custom_config)
    return outputs


def _dense(x) -> tf.Tensor:
    if isinstance(x, tf.SparseTensor):
        return tf.sparse.to_dense(x, default_value="")
    if isinstance(x, tf.RaggedTensor):
        return x.to_tensor(default_value="")
    return x


def _ragged(x) -> tf.RaggedTensor:
    if isinstance(x, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(x)
    if isinstance(x, tf.RaggedTensor):
        return x
    return tf.RaggedTensor.from_tensor(x)


def detokenize(tokens: tf.RaggedTensor) -> tf.Tensor:
    """[B, (T)] French tokens -> [B] sentences: the inverse of wordpiece and `normalize`'s
    splitting (`normalize` never makes a word that starts with "#", so "##" is unambiguous).

    Spaces go back only where French typography has none (before . , ) and after ( );
    French keeps its space before ! ? : ; and inside « ».
    """
    x = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    x = tf.strings.regex_replace(x, " " + WORDPIECE_JOINER, "")  # rejoin WordPiece continuations
    x = tf.strings.regex_replace(x, r" ([.,)\]}…])", r"\1")
    return tf.strings.regex_replace(x, r"([(\[{]) ", r"\1")
