"""Sentence and clause splitting in the serving graph: a line of several sentences is
translated one sentence at a time, the way the model was trained (fra.txt's pairs are single
short sentences), and a sentence longer than the model's max_source_length tokens in pieces
of at most that many, cut at its clause boundaries.

Translated whole, a paragraph comes back short: the model stops after a sentence or two, or
loops, and its tail is cut at max_source_length tokens (BENCHMARKS.md, "Quality on new
sentences"). Core TensorFlow string ops only, so TF Serving runs it.

RE2 (tf.strings.regex_replace) has no lookbehind, so the periods of titles and initials are
masked first, the boundaries marked, and the masks restored in each sentence.
"""
from __future__ import annotations

import tensorflow as tf

_BOUNDARY_MARK, _PERIOD_MASK = "\x1e", "\x1f"  # ASCII record and unit separators
_PIECE_MARK = "\x1d"  # ASCII group separator
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


# Where an over-long sentence may be cut, strongest first; each is applied only to the pieces
# still too long after the ones before: after a semicolon, a colon or a dash; after a comma
# before a conjunction or a relative word; after any comma; between words. Each piece keeps
# its punctuation and the whitespace after it, so pieces joined give the sentence back.
CUTS = (
    (r"([;:]\s+|\s[-–—]\s+)", r"\1" + _PIECE_MARK),
    (r"(,\s+)((?i:and|but|or|nor|so|yet|because|although|though|while|whereas|which|who|"
     r"whom|whose|where|when|if|unless|since|until|after|before)\b)",
     r"\1" + _PIECE_MARK + r"\2"),
    (r"(,\s+)", r"\1" + _PIECE_MARK),
    (r"(\s+)", r"\1" + _PIECE_MARK),
)


def cut_where(pieces: tf.Tensor, too_long: tf.Tensor, cut: tuple[str, str]) -> tf.RaggedTensor:
    """[N] pieces -> [N, (P)]: the ones `too_long` [N] cut by one of CUTS, the others whole."""
    marked = tf.where(too_long, tf.strings.regex_replace(pieces, *cut), pieces)
    split = tf.strings.split(marked, sep=_PIECE_MARK)
    return tf.ragged.boolean_mask(split, tf.not_equal(split, ""))


def pack(lengths: tf.Tensor, owner: tf.Tensor, limit: int) -> tf.Tensor:
    """Greedy packing of consecutive pieces [U] (tokens `lengths`, sentence `owner`, sorted)
    into chunks of at most `limit` tokens, never across sentences: the chunk [U] int32 of each
    piece, numbered from 0. A piece longer than `limit` is a chunk of its own."""
    first_of_owner = tf.concat([tf.ones([1], tf.bool)[:tf.size(owner)],
                                tf.not_equal(owner[1:], owner[:-1])], axis=0)

    def add(state: tuple[tf.Tensor, tf.Tensor], piece: tuple[tf.Tensor, tf.Tensor]):
        chunk, used = state
        length, first = piece
        starts = first | ((used + length > limit) & (used > 0))
        return chunk + tf.cast(starts, tf.int32), tf.where(starts, length, used + length)

    chunks, _ = tf.scan(add, (tf.cast(lengths, tf.int32), first_of_owner),
                        initializer=(tf.constant(-1), tf.constant(0)))
    return chunks
