"""Subword regularization (hparams.subword_alpha): training sentences cut into pieces anew each
epoch from Transform's own SentencePiece model, the sentences themselves unchanged."""
from __future__ import annotations

import dataclasses
import gzip

import pytest
import tensorflow as tf
import tensorflow_text as text

from trainer_module import input_pipeline
from trainer_module.hparams import HParams, get_profile
from transform_module import preprocessing as pp

HPARAMS = dataclasses.replace(get_profile("smoke"), max_source_length=256,
                              max_target_length=256, subword_alpha=0.2)


@pytest.fixture(scope="module")
def lines(fra_txt) -> list[tuple[str, str]]:
    """About 330 (English, French) lines from all over fra.txt."""
    with open(fra_txt, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")[:2]) for line in f.readlines()[::500]]


def _output(lines: list[tuple[str, str]], tokenizer: str):
    return pp.analyze_in_memory([{"english": [e], "french": [f]} for e, f in lines],
                                {"tokenizer": tokenizer, "vocab_size": 300,
                                 "joint_vocabulary": True})


@pytest.fixture(scope="module")
def model(lines) -> bytes:
    """The joint SentencePiece model Transform learns from `lines`."""
    return input_pipeline.sentencepiece_model(_output(lines, "sentencepiece"))


def test_resampled_pairs_spell_the_same_sentences_in_new_pieces_each_epoch(lines, model):
    one_best = text.SentencepieceTokenizer(model=model)
    sources, targets = (  # as Transform makes them
        one_best.tokenize(pp.normalize(tf.constant([line[side] for line in lines]), True))
        for side in (0, 1))
    epochs = 3
    pairs = tf.data.Dataset.from_tensor_slices((sources, targets)).repeat(epochs)
    resampled = list(input_pipeline.resample_pieces(pairs, model, HPARAMS).as_numpy_iterator())

    assert len(resampled) == epochs * len(lines)  # short pairs: none too long, none lost
    best = [(tuple(s), tuple(t)) for s, t in zip(sources.to_list(), targets.to_list())]

    def spelled(pairs: list) -> list[str]:
        return one_best.detokenize(tf.ragged.constant(
            [list(ids) for pair in pairs for ids in pair])).numpy().tolist()

    assert spelled(resampled) == spelled(best) * epochs
    new = [(tuple(s), tuple(t)) != best[i % len(lines)] for i, (s, t) in enumerate(resampled)]
    assert 0.2 < sum(new) / len(new) < 1.0  # many pairs in new pieces, some in the best
    first, second = (resampled[k * len(lines):(k + 1) * len(lines)] for k in (0, 1))
    assert any((tuple(a), tuple(b)) != (tuple(c), tuple(d))
               for (a, b), (c, d) in zip(first, second))  # a new draw each epoch
    assert all(len(s) <= HPARAMS.max_source_length and len(t) <= HPARAMS.max_target_length
               for s, t in resampled)


def test_a_pair_the_new_pieces_make_too_long_is_dropped(lines, model):
    ids = text.SentencepieceTokenizer(model=model).tokenize([e for e, _ in lines])
    longest = int(ids.row_lengths().numpy().max())
    tight = dataclasses.replace(HPARAMS, max_source_length=longest, max_target_length=longest,
                                subword_alpha=0.0001)  # nearly uniform: many more pieces
    pairs = tf.data.Dataset.from_tensor_slices((ids, ids)).repeat(3)
    kept = list(input_pipeline.resample_pieces(pairs, model, tight).as_numpy_iterator())
    assert 0 < len(kept) < 3 * len(lines)
    assert all(len(s) <= longest and len(t) <= longest for s, t in kept)


def test_subword_sampling_without_a_sentencepiece_model_is_refused_by_name(lines, tmp_path):
    empty = tmp_path / "part-00000.gz"
    empty.write_bytes(gzip.compress(b""))
    with pytest.raises(ValueError, match=r"subword_alpha needs one SentencePiece model for "
                                         r"both languages .*joint_vocab\.model"):
        input_pipeline.make_dataset(str(empty), _output(lines, "wordpiece"), HPARAMS,
                                    training=True)


@pytest.mark.parametrize("alpha", [-0.1, 1.5])
def test_subword_alpha_outside_zero_to_one_is_refused(alpha):
    with pytest.raises(ValueError, match="subword_alpha must be in"):
        HParams(subword_alpha=alpha)
