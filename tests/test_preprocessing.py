"""Transform's in-graph normalization, vocabularies and French references, on real tf.Transform."""
from __future__ import annotations

import os
import tempfile

import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from trainer_module import preprocessing as pp
from trainer_module.hparams import UNK_ID


@pytest.mark.parametrize("raw, normalized", [
    ("Go.", "Go ."),
    ("Ça va\u202f!", "Ça va !"),  # narrow no-break space (French typography) -> space
    ("Qu'est-ce que c'est ?", "Qu'est-ce que c'est ?"),  # in-word apostrophes/hyphens kept
    ("'Hello,' he said.", "' Hello , ' he said ."),  # edge apostrophes split off
    ("rock-", "rock -"),
    ("«Bonjour»", "« Bonjour »"),
    ("ﬁne Ｔｏｍ", "fine Tom"),  # NFKC
    ("  Tab\there  ", "Tab here"),  # whitespace collapsed
    ("Bell\x07ring", "Bell ring"),  # control character separates words
    ("zero\u200bwidth", "zerowidth"),  # format character vanishes
    ("It's 5:30.", "It's 5 : 30 ."),
    ("Été à Paris", "Été à Paris"),  # non-ASCII letters are word characters; case kept
])
def test_normalize(raw, normalized):
    assert pp.normalize(tf.constant([raw])).numpy()[0].decode() == normalized


def test_detokenize_undoes_the_splitting_french_style():
    tokens = tf.ragged.constant([["Je", "vais", "(", "vite", ")", "à", "Paris", "."],
                                 ["Ça", "va", "?"], []])
    assert [s.decode() for s in pp.detokenize(tokens).numpy()] == [
        "Je vais (vite) à Paris.", "Ça va ?", ""]


def test_length_buckets():
    sentences = ["Go.", "one two three four five", "a b c d e f", "x " * 11, "y " * 20, "z " * 21]
    assert [b.decode() for b in pp.length_bucket(tf.constant(sentences)).numpy()] == [
        "01-05", "01-05", "06-10", "11-20", "11-20", "21+"]


def test_vocabularies_reserve_ids_and_keep_every_reference():
    raw = [{"english": ["Go."], "french": ["Va !", "Bouge !"]},
           {"english": ["Go now."], "french": ["Va maintenant !"]},
           {"english": ["Hi."], "french": ["Salut !"]}]
    spec = {"english": tf.io.FixedLenFeature([1], tf.string),
            "french": tf.io.VarLenFeature(tf.string)}
    with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        (rows, _), _ = (raw, tft.DatasetMetadata.from_feature_spec(spec)) | \
            tft_beam.AnalyzeAndTransformDataset(
                lambda inputs: pp.preprocessing_fn(inputs, {"tokenizer": "word",
                                                      "frequency_threshold": 2}))
    # Only "Go" and "!" / "Va" / "." occur twice: everything else is [UNK].
    english = [list(r["source_ids$ragged_values"]) for r in rows]
    assert english[0][1] == english[1][2]  # "." has one id everywhere
    assert english[0][0] == english[1][0] >= len(pp.RESERVED_TOKENS)  # "Go"
    assert english[2] == [UNK_ID, english[0][1]]  # "Hi" is rare
    french_lengths = [list(r["target_ids$row_lengths_1"]) for r in rows]
    assert french_lengths == [[2, 2], [3], [2]]  # all references, each tokenized
    french = [list(r["target_ids$ragged_values"]) for r in rows]
    assert french[0][0] == french[1][0] >= len(pp.RESERVED_TOKENS)  # "Va"
    assert french[2][0] == UNK_ID  # "Salut" is rare
    assert [r["english_length_bucket"] for r in rows] == [b"01-05"] * 3


def _analyze(raw: list[dict], custom_config: dict):
    """tf.Transform on `raw` (English only): (transform_fn, its output directory)."""
    spec = {"english": tf.io.FixedLenFeature([1], tf.string)}
    with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        transform_fn = (raw, tft.DatasetMetadata.from_feature_spec(spec)) | \
            tft_beam.AnalyzeDataset(lambda inputs: pp.preprocessing_fn(inputs, custom_config))
        out = tempfile.mkdtemp()
        _ = transform_fn | tft_beam.WriteTransformFn(out)
    return tft.TFTransformOutput(out)


def test_wordpiece_is_learned_in_transform_and_spells_rare_words():
    frequent = ["Tom is here.", "Tom is happy.", "Mary is here."] * 12
    output = _analyze([{"english": [s]} for s in frequent + ["Tomas is hereby happy."]],
                      {"tokenizer": "wordpiece", "vocab_size": 200})
    pieces = [p.decode() for p in output.vocabulary_by_name(pp.SOURCE_VOCAB)]
    assert len(pieces) <= 200 and "Tom" in pieces and "##s" in pieces
    assert not set(pieces) & set(pp.RESERVED_TOKENS)  # ids put those first, not the file
    tokens = [tok.encode() for tok in pp.RESERVED_TOKENS] + [p.encode() for p in pieces]

    def ids(sentences: list[str]) -> list[list[int]]:
        layer = output.transform_features_layer()
        result = layer({"english": tf.constant([[s] for s in sentences])})[pp.SOURCE_IDS]
        return result.to_list()

    unseen = "Zoë is here."  # "ë" never occurs in the analyzed data
    rare, unknown = ids(["Tomas is hereby happy.", unseen])
    assert UNK_ID not in rare and min(rare) >= len(pp.RESERVED_TOKENS)
    spelled = [tokens[i].decode() for i in rare]
    assert spelled[0] == "Tom" and len(spelled) > 5  # "Tomas" and "hereby" need several pieces
    assert pp.detokenize(tf.ragged.constant([spelled])).numpy()[0].decode() == \
        "Tomas is hereby happy."
    assert unknown[0] == UNK_ID and UNK_ID not in unknown[1:]  # only the unspellable word


def test_tokenizer_is_checked():
    with pytest.raises(ValueError, match="unknown tokenizer 'bpe'"):
        _analyze([{"english": ["Go."]}], {"tokenizer": "bpe"})
