"""Sentence splitting in the serving graph: a line of several sentences is translated one
sentence at a time, the way the model was trained (fra.txt's pairs are single short sentences).

Translated whole, a paragraph comes back short: the model stops after a sentence or two, or
loops, and its tail is cut at max_source_length tokens (BENCHMARKS.md, "Quality on new
sentences"). Core TensorFlow string ops only, so TF Serving runs it.

RE2 (tf.strings.regex_replace) has no lookbehind, so the periods of titles and initials are
masked first, the boundaries marked, and the masks restored in each sentence.
"""
from __future__ import annotations

import tensorflow as tf

_BOUNDARY_MARK, _PERIOD_MASK = "\x1e", "\x1f"  # ASCII record and unit separators
# A title or an initial ("Mr. Smith", "J. K. Rowling", "the U.S. Army"): its period does not
# end a sentence. "I" is left out: "So do I." ends one.
_ABBREVIATION = r"\b(Mr|Mrs|Ms|Dr|Prof|St|Mt|Jr|Sr|[A-HJ-Z])\.(\s)"
# The end of a sentence: end punctuation and any closing quotes or brackets, then whitespace,
# then what starts a sentence: any opening quotes or brackets, then a capital or a digit.
_BOUNDARY = r"([.!?…]+[\"'»”’)\]]*)\s+([\"'«“‘(\[¿¡]*[\p{Lu}\p{N}])"


def split_sentences(lines: tf.Tensor) -> tf.RaggedTensor:
    """[B] lines -> [B, (sentences)] strings; a line without a boundary (an empty one too) is
    one sentence. Whitespace at the boundaries is dropped, the rest of each line kept as is."""
    lines = tf.strings.regex_replace(lines, f"[{_BOUNDARY_MARK}{_PERIOD_MASK}]", " ")
    lines = tf.strings.regex_replace(lines, _ABBREVIATION, r"\1" + _PERIOD_MASK + r"\2")
    lines = tf.strings.regex_replace(lines, _BOUNDARY, r"\1" + _BOUNDARY_MARK + r"\2")
    sentences = tf.strings.split(lines, sep=_BOUNDARY_MARK)
    return tf.ragged.map_flat_values(tf.strings.regex_replace, sentences, _PERIOD_MASK, ".")


def join_sentences(sentences: tf.RaggedTensor) -> tf.Tensor:
    """[B, (sentences)] -> [B] lines, the sentences separated by one space."""
    return tf.strings.reduce_join(sentences, axis=1, separator=" ")
