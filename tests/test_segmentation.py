"""Sentence splitting in the serving graph (trainer_module/segmentation.py)."""
import pytest
import tensorflow as tf

from trainer_module.segmentation import join_sentences, split_sentences


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
