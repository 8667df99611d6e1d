"""Sentence splitting in the serving graph (trainer_module/segmentation.py)."""
import pytest
import tensorflow as tf

from trainer_module.segmentation import CUTS, cut_where, join_sentences, pack, split_sentences


def split(line: str) -> list[str]:
    return [s.decode() for s in split_sentences(tf.constant([line])).to_list()[0]]


@pytest.mark.parametrize("line, sentences", [
    ("Hi! How are you? I'm fine.", ["Hi!", "How are you?", "I'm fine."]),
    ('He said "Go." "Now?" (Maybe.) 3 cats.', ['He said "Go."', '"Now?"', "(Maybe.)", "3 cats."]),
    ("Well... I think so.", ["Well...", "I think so."]),
    ("So do I. Yes.", ["So do I.", "Yes."]),
    ("Ça va. Élan!", ["Ça va.", "Élan!"]),
])
def test_a_line_splits_at_each_sentence_end(line, sentences):
    assert split(line) == sentences


@pytest.mark.parametrize("line", [
    "Mr. Smith met Dr. Jones and J. K. Rowling in the U.S. Army.",
    "Pi is 3.14 or so.",
    "Wait . . . what?",
    "It costs $5. and more",  # no capital after the period
    "Tom left. ",  # trailing whitespace is not a boundary
    "",
])
def test_titles_initials_and_other_periods_do_not_split(line):
    assert split(line) == [line]


def test_the_markers_in_the_input_become_spaces_and_lines_keep_their_order():
    sentences = split_sentences(tf.constant(["a\x1eb\x1fc", "One. Two.", ""]))
    assert sentences.to_list() == [[b"a b c"], [b"One.", b"Two."], [b""]]
    assert join_sentences(sentences).numpy().tolist() == [b"a b c", b"One. Two.", b""]


def _cut(text: str, level: int) -> list[str]:
    pieces = cut_where(tf.constant([text]), tf.constant([True]), CUTS[level])
    return [p.decode() for p in pieces[0].numpy()]


@pytest.mark.parametrize("level, text, pieces", [
    (0, "He came; she left: it rained - again.",
     ["He came; ", "she left: ", "it rained - ", "again."]),
    (1, "I stayed home, because it rained, and she, who knew, left.",
     ["I stayed home, ", "because it rained, ", "and she, ", "who knew, left."]),
    (2, "Red, green, blue.", ["Red, ", "green, ", "blue."]),
    (3, "one  two three", ["one  ", "two ", "three"]),
])
def test_a_long_sentence_is_cut_after_its_boundaries_and_the_pieces_give_it_back(level, text,
                                                                                 pieces):
    assert _cut(text, level) == pieces
    assert "".join(pieces) == text


def test_only_the_pieces_too_long_are_cut():
    pieces = cut_where(tf.constant(["a; b", "c; d", ""]), tf.constant([True, False, True]),
                       CUTS[0])
    assert pieces.to_list() == [[b"a; ", b"b"], [b"c; d"], []]


@pytest.mark.parametrize("lengths, owner, chunks", [
    ([10, 10, 10], [0, 0, 0], [0, 0, 0]),       # 30 tokens fit the limit: one chunk
    ([30, 30, 30], [0, 0, 0], [0, 1, 2]),       # each piece alone
    ([20, 20, 20, 5], [0, 0, 0, 0], [0, 0, 1, 1]),
    ([60, 5, 5], [0, 0, 0], [0, 1, 1]),         # a piece over the limit is a chunk of its own
    ([5, 5, 5], [0, 1, 1], [0, 1, 1]),          # never across sentences
    ([], [], []),
])
def test_pieces_are_packed_in_order_into_chunks_within_the_limit(lengths, owner, chunks):
    packed = pack(tf.constant(lengths, tf.int32), tf.constant(owner, tf.int64), 40)
    assert packed.numpy().tolist() == chunks
