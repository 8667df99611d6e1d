"""Transform's in-graph normalization, vocabularies and French references, on real tf.Transform."""
from __future__ import annotations

import collections
import os
import re
import tempfile

import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from helpers import TF_SERVING_2_12_TEXT_OPS, ops_core_tensorflow_lacks
from transform_module import preprocessing as pp, sentencepiece, wordpiece
from transform_module.tokens import UNK_ID


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
    ("It's 5:30.", "It's 5:30 ."),  # separators inside numbers stay (whole_numbers)
    ("3,50 € et 1,2,3 ; 12/05/2020.", "3,50 € et 1,2,3 ; 12/05/2020 ."),
    ("Il a 3, 5 ou 6 ans.", "Il a 3 , 5 ou 6 ans ."),  # a comma before a space is punctuation
    ("a\ue000,\ue000b", "a , b"),  # private-use characters (the number mark) vanish
    ("Été à Paris", "Été à Paris"),  # non-ASCII letters are word characters; case kept
])
def test_normalize(raw, normalized):
    assert pp.normalize(tf.constant([raw])).numpy()[0].decode() == normalized


def test_separators_split_off_numbers_when_whole_numbers_is_off():
    normalized = pp.normalize(tf.constant(["Il est 5:30, ça coûte 3,50."]), whole_numbers=False)
    assert normalized.numpy()[0].decode() == "Il est 5 : 30 , ça coûte 3 , 50 ."


@pytest.mark.parametrize("raw, normalized", [
    ("L'homme qu'il voit d'ici", "L' homme qu' il voit d' ici"),
    ("Jusqu'à lorsqu'elle puisqu'on j'ai n'est s'il c'est m'a t'aime",
     "Jusqu' à lorsqu' elle puisqu' on j' ai n' est s' il c' est m' a t' aime"),
    ("C’est l’homme.", "C’ est l’ homme ."),  # typographic apostrophe
    ("aujourd'hui quelqu'un presqu'île", "aujourd'hui quelqu'un presqu'île"),  # not elisions
    ("(l'eau) « d'abord »", "( l' eau ) « d' abord »"),
    ("l' 'l", "l ' ' l"),  # edge apostrophes are still split off, not taken for elisions
])
def test_split_elisions(raw, normalized):
    assert pp.normalize(tf.constant([raw]), split_elisions=True).numpy()[0].decode() == normalized


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
                                                      "joint_vocabulary": False,
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


def test_wordpiece_is_learned_in_transform_and_spells_rare_words():
    frequent = ["Tom is here.", "Tom is happy.", "Mary is here."] * 12
    output = pp.analyze_in_memory(
        [{"english": [s]} for s in frequent + ["Tomas is hereby happy."]],
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
        pp.analyze_in_memory([{"english": ["Go."]}], {"tokenizer": "bpe"})


# French references with numbers (times, prices, dates, thousands) and elisions: each must come
# back unchanged from normalize -> tokenize -> WordPiece -> detokenize.
ROUND_TRIPS = [
    "3,50", "5:30", "1 000", "10.5", "2 500,75 €", "Il est 5:30.", "Il est 8 h 30.",
    "Rendez-vous à 14 h 30.", "Je me suis réveillé à 6h30.", "Ça coûte 3,50 $.",
    "Le 12/05/2020, à 8:15.", "J'ai payé 2 000 yens pour cet atlas.", "Prix : 1 234,56 €.",
    "Il est né en 1990.", "Il mesure 1.85 m, pas 1,9 m.", "Compte 1,2,3 !", "Pi vaut 3.14159.",
    "Du 1/2 au 3/4 (50 %).", "Il a 3 ans, 5 mois et 2 jours.", "Suis-je bien au 223-1374 ?",
    "L'homme d'aujourd'hui n'a qu'un euro jusqu'à 10:45.", "C’est l’heure : 7 h 05.",
    "Lorsqu'il part, puisqu'elle reste, j'attends quelqu'un.",
]


@pytest.fixture(scope="module")
def joint_output() -> tft.TFTransformOutput:
    """A small joint WordPiece vocabulary (numbers spelled from pieces) with elisions split."""
    french = ["Il est 10:45 et ça coûte 1 234,56 € ; 7 h 05, 6h30 ou 8:15 (50 %).",
              "Le 12/05/2020, j'ai payé 3,14159 $ pour 1.85 m à 223-1374 ; 9 h 30 ?",
              "L'homme n'a qu'un euro jusqu'à Noël. C’est l’heure ! Lorsqu'il part, "
              "puisqu'elle reste, j'attends quelqu'un d'aujourd'hui : le 3/4 de 1,2.",
              "Un homme, des ans, des mois, des jours, des yens, cet atlas, né en 1990 ; "
              "Rendez-vous, réveillé, pas, Compte, Pi vaut, Du au Prix Ça Suis-je bien, Je J'ai"]
    raw = [{"english": ["Tom paid 3.50 euros at 5:30."], "french": [f]} for f in french] * 4
    return pp.analyze_in_memory(raw, {"tokenizer": "wordpiece", "vocab_size": 250,
                                      "split_elisions": True, "joint_vocabulary": True})


def _french_pieces(output: tft.TFTransformOutput, sentences: list[str]) -> list[list[str]]:
    """Each sentence as one French reference through the Transform graph: its pieces."""
    layer = output.transform_features_layer()
    ids = layer({"english": tf.constant([["Go."]] * len(sentences)),
                 "french": tf.sparse.from_dense(tf.constant([[s] for s in sentences]))}
                )[pp.TARGET_IDS]
    tokens = [t.encode() for t in pp.RESERVED_TOKENS] + output.vocabulary_by_name(pp.TARGET_VOCAB)
    return [[tokens[i].decode() for i in reference] for reference in ids.values.to_list()]


def test_numbers_and_elisions_survive_wordpiece_and_detokenize(joint_output):
    pieces = _french_pieces(joint_output, ROUND_TRIPS)
    assert all(pp.RESERVED_TOKENS[UNK_ID] not in p for p in pieces)
    assert sum(p.startswith(wordpiece.WORDPIECE_JOINER) for row in pieces for p in row) > 20
    detokenized = [s.decode() for s in pp.detokenize(tf.ragged.constant(pieces)).numpy()]
    assert detokenized == ROUND_TRIPS


def test_elided_words_get_the_pieces_of_the_bare_word(joint_output):
    elided, bare = _french_pieces(joint_output, ["L'homme", "homme"])
    assert elided[-len(bare):] == bare and "".join(elided[:-len(bare)]) == "L##'"


def test_joint_vocabulary_is_one_file_with_one_id_per_piece(joint_output):
    assert pp.shares_vocabulary(joint_output)
    assert joint_output.vocabulary_file_by_name(pp.SOURCE_VOCAB).endswith(pp.JOINT_VOCAB)
    english = joint_output.transform_features_layer()(
        {"english": tf.constant([["Tom at 5:30"]])})[pp.SOURCE_IDS].to_list()[0]
    tokens = [t.encode() for t in pp.RESERVED_TOKENS] + \
        joint_output.vocabulary_by_name(pp.TARGET_VOCAB)
    assert b"".join(tokens[i].replace(b"##", b"") for i in english) == b"Tomat5:30"


def test_separate_vocabularies_are_not_shared():
    raw = [{"english": ["Tom is here."], "french": ["Tom est ici."]}] * 3
    assert not pp.shares_vocabulary(pp.analyze_in_memory(raw, {"vocab_size": 100,
                                                               "joint_vocabulary": False}))


def test_wordpiece_min_count_lets_rarer_pieces_in():
    counts = collections.Counter({b"maison": 4, b"maisons": 3, b"chat": 12, b"chats": 11})
    default = wordpiece.learn_wordpiece(counts.items(), 1000)
    lower = wordpiece.learn_wordpiece(counts.items(), 1000, min_count=3)
    assert "chat" in default and "maison" not in default
    assert "maison" in lower and set(default) < set(lower)


def test_wordpiece_vocabulary_is_capped_when_the_learner_overshoots():
    counts = collections.Counter({w: 3 for w in (b"chat", b"chien", b"maison", b"voiture")})
    characters = {p for p in wordpiece.learn_wordpiece(counts.items(), 1000, min_count=3)
                  if len(p.removeprefix("##")) == 1}
    size = len(characters) + 3  # the learner's search stops at min_count 3 with more pieces
    pieces = wordpiece.learn_wordpiece(counts.items(), size, min_count=3)
    assert len(pieces) == size and characters < set(pieces)  # every word stays spellable


@pytest.fixture(scope="module")
def sentencepiece_output() -> tft.TFTransformOutput:
    """A small joint unigram SentencePiece model learned in Transform, elisions split."""
    french = ROUND_TRIPS + ["Un homme, des ans, des mois, des jours. Tom est ici."]
    raw = [{"english": ["Tom paid 3.50 euros at 5:30."], "french": [f]} for f in french] * 3
    return pp.analyze_in_memory(raw, {"tokenizer": "sentencepiece", "vocab_size": 300,
                                      "split_elisions": True, "joint_vocabulary": True})


def test_sentencepiece_is_learned_in_transform_and_round_trips(sentencepiece_output):
    """Its ids put the reserved tokens first; its vocabulary file, written in WordPiece's form,
    detokenizes every reference back unchanged, numbers and elisions included."""
    pieces = [p.decode() for p in sentencepiece_output.vocabulary_by_name(pp.TARGET_VOCAB)]
    assert 50 < len(pieces) <= 300 and not set(pieces) & set(pp.RESERVED_TOKENS)
    assert any(p.startswith("##") for p in pieces) and sentencepiece.WORD_START in pieces
    references = _french_pieces(sentencepiece_output, ROUND_TRIPS)
    assert all(pp.RESERVED_TOKENS[UNK_ID] not in r for r in references)
    detokenized = [s.decode() for s in pp.detokenize(tf.ragged.constant(references)).numpy()]
    assert detokenized == ROUND_TRIPS
    english = sentencepiece_output.transform_features_layer()(
        {"english": tf.constant([["Tom paid 3.50 euros."], ["Zoë 漢"]])})[pp.SOURCE_IDS]
    known, unseen = english.to_list()
    assert min(known) >= len(pp.RESERVED_TOKENS) and UNK_ID in unseen  # unseen characters


def test_wordpiece_form_of_sentencepiece_pieces():
    assert [sentencepiece.wordpiece_form(p) for p in ("▁homme", "ment", "▁", "▁l'")] == [
        "homme", "##ment", "▁", "l'"]


def test_the_sentencepiece_learner_reads_a_bounded_sample(fra_sample, caplog):
    """At most sentencepiece_max_sentences distinct sentences, chosen by hash: the same sample
    (so the same model) from any bundling, spread over the length-sorted corpus."""
    rows = [{"english": r["english"]} for r in _fra_rows(fra_sample)]
    config = {"tokenizer": "sentencepiece", "vocab_size": 200,
              "sentencepiece_max_sentences": 300}
    with caplog.at_level("INFO", logger=sentencepiece.__name__):
        output = pp.analyze_in_memory(rows, config)
        again = pp.analyze_in_memory(list(reversed(rows)), config)
    assert f"distinct sentences (a sample of 300 of {len(rows):,}: " \
        "sentencepiece_max_sentences)" in caplog.text
    assert output.vocabulary_by_name(pp.SOURCE_VOCAB) == again.vocabulary_by_name(pp.SOURCE_VOCAB)


@pytest.mark.parametrize("output, ops", [
    ("sentencepiece_output", ["NormalizeUTF8", "SentencepieceOp", "SentencepieceTokenizeOp"]),
    ("joint_output", ["NormalizeUTF8", "WordpieceTokenizeWithOffsets"])])
def test_each_tokenizer_needs_only_tf_servings_text_ops(request, output, ops):
    """The Transform graph that the export embeds, read in a process without tensorflow_text:
    its non-core ops are NormalizeUTF8 and the tokenizer's, all in TF Serving 2.12."""
    unknown = ops_core_tensorflow_lacks(os.path.join(
        request.getfixturevalue(output).transform_savedmodel_dir, "saved_model.pb"))
    assert unknown == ops and set(unknown) <= set(TF_SERVING_2_12_TEXT_OPS)


def test_all_vocabularies_are_learned_in_one_stage_each_with_its_own_paths():
    """learn_each: one Learn step over one element per vocabulary (so that Beam's workers can
    take one each), and each vocabulary's paths back in its own outputs, in name order."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    def learn(name: str, data: list[str], count: int) -> tuple[bytes, bytes]:
        return f"{name}/vocab {len(data)} of {count}".encode(), f"{name}/model".encode()

    pipeline = beam.Pipeline()
    bounded = {n: (pipeline | f"Create[{n}]" >> beam.Create([list(n)]),
                   pipeline | f"Count[{n}]" >> beam.Create([2 * len(n)])) for n in ("en", "fra")}
    outputs = wordpiece.learn_each(bounded, learn, paths=2)
    for label, output, expected in zip("abcd", outputs, [
            b"en/vocab 2 of 4", b"en/model", b"fra/vocab 3 of 6", b"fra/model"]):
        assert_that(output | f"Decode{label}" >> beam.Map(lambda p: p.item()),
                    equal_to([expected]), label=f"Check{label}")

    class Labels(beam.pipeline.PipelineVisitor):
        def __init__(self) -> None:
            self.labels: list[str] = []

        def visit_transform(self, node) -> None:
            self.labels.append(node.full_label)

    labels = Labels()
    pipeline.visit(labels)
    assert sum(label.split("/")[-1] == "Learn" for label in labels.labels) == 1
    pipeline.run().wait_until_finish()


def _fra_rows(path: str) -> list[dict[str, list[str]]]:
    """fra.txt lines -> one row per English sentence with all its references."""
    references = collections.defaultdict(list)
    for line in open(path, encoding="utf-8"):
        english, french = line.split("\t")[:2]
        references[english].append(french)
    return [{"english": [e], "french": f} for e, f in references.items()]


def _words_counted_in_one_place(rows, side: str) -> collections.Counter:
    """The old analyzer: every word of one side counted into one Counter on one worker."""
    sentences = [s for row in rows for s in row[side]]
    words = pp.tokenize(tf.constant(sentences), split_elisions=side == "french")
    return collections.Counter(words.flat_values.numpy().tolist())


def test_counting_per_word_gives_the_pieces_of_one_global_count(fra_sample):
    """Counted per key across workers and cut to the most frequent words (a bound above
    this data's distinct words), the vocabulary is the one a single global count learns."""
    rows = _fra_rows(fra_sample)
    output = pp.analyze_in_memory(rows, {"tokenizer": "wordpiece", "joint_vocabulary": False,
                                         "vocab_size": 2000, "wordpiece_min_count": 3})
    for side, vocab in (("english", pp.SOURCE_VOCAB), ("french", pp.TARGET_VOCAB)):
        before = wordpiece.learn_wordpiece(_words_counted_in_one_place(rows, side).items(), 2000, 3)
        assert [p.decode() for p in output.vocabulary_by_name(vocab)] == before


def test_the_learner_sees_only_the_most_frequent_words(fra_sample, caplog):
    rows = _fra_rows(fra_sample)
    counts = _words_counted_in_one_place(rows, "english")
    top = sorted(counts.items(), key=lambda wc: (wc[1], wc[0]), reverse=True)[:300]
    with caplog.at_level("INFO", logger=wordpiece.__name__):
        output = pp.analyze_in_memory([{"english": r["english"]} for r in rows], {
            "tokenizer": "wordpiece", "joint_vocabulary": False, "vocab_size": 500,
            "wordpiece_min_count": 3, "wordpiece_max_words": 300})
    assert [p.decode() for p in output.vocabulary_by_name(pp.SOURCE_VOCAB)] == \
        wordpiece.learn_wordpiece(top, 500, 3)
    assert f"from 300 distinct words (the 300 most frequent of {len(counts):,}: " \
        "wordpiece_max_words)" in caplog.text


@pytest.mark.parametrize("vocab_size", [8000, 300])  # out of the words' reach; within it
def test_the_learner_gives_tensorflow_texts_vocabulary_with_or_without_its_search(
        fra_sample, vocab_size):
    words = [(w.decode(), c) for w, c in _words_counted_in_one_place(
        _fra_rows(fra_sample), "english").items() if w]
    assert wordpiece.learn_pieces(words, vocab_size, 10) == wordpiece.learner_lib.learn(
        words, vocab_size, reserved_tokens=[], lower_thresh=10, joiner="##")


@pytest.mark.parametrize("config, message", [
    ({"whole_numbers": "yes"}, "whole_numbers must be true or false, got 'yes'"),
    ({"split_elisions": 1}, "split_elisions must be true or false"),
    ({"wordpiece_min_count": 0}, "wordpiece_min_count must be a positive integer, got 0"),
    ({"wordpiece_max_words": 0}, "wordpiece_max_words must be a positive integer, got 0"),
    ({"sentencepiece_max_sentences": 0},
     "sentencepiece_max_sentences must be a positive integer, got 0"),
    ({"vocab_size": 2.5}, "vocab_size must be a positive integer"),
    ({"tokenizer": "bpe"}, "unknown tokenizer 'bpe'"),
])
def test_bad_settings_are_refused(config, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        pp.TransformSettings.from_config({"code_version": "abc", **config})
