"""Transform's preprocessing_fn: normalize, tokenize and map words to ids, all in the graph.

The same graph runs in Transform (training data) and inside the exported SavedModel (serving),
so there is no training/serving skew. Only long-standing TF and tensorflow-text ops are used
(TF Serving embeds tensorflow-text 2.12).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf
import tensorflow_text as text
import tensorflow_transform as tft

from trainer_module.hparams import END_ID, PAD_ID, START_ID, UNK_ID

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


def _ids(tokens: tf.RaggedTensor, vocab_name: str, custom_config: dict[str, Any]) -> tf.RaggedTensor:
    """Learned vocabulary (most frequent first) shifted past the reserved ids; OOV -> [UNK]."""
    vocab = tft.vocabulary(
        tokens, top_k=int(custom_config.get("vocab_size", DEFAULT_VOCAB_SIZE)),
        frequency_threshold=int(custom_config.get("frequency_threshold",
                                                  DEFAULT_FREQUENCY_THRESHOLD)),
        vocab_filename=vocab_name)
    index = tft.apply_vocabulary(tokens, vocab, default_value=-1)
    return tf.ragged.map_flat_values(
        lambda i: tf.where(i < 0, tf.cast(UNK_ID, i.dtype), i + len(RESERVED_TOKENS)), index)


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
    """[B, (T)] French tokens -> [B] sentences: the inverse of `normalize`'s splitting.

    Spaces go back only where French typography has none (before . , ) and after ( );
    French keeps its space before ! ? : ; and inside « ».
    """
    x = tf.strings.reduce_join(tokens, axis=-1, separator=" ")
    x = tf.strings.regex_replace(x, r" ([.,)\]}…])", r"\1")
    return tf.strings.regex_replace(x, r"([(\[{]) ", r"\1")
