"""The exported model's Evaluator sums (translate_examples): the references go through the
model in bounded chunks, with the same sums as all of them at once, in eager code and in the
SavedModel."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import dataclasses
import logging
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (the Transform graph's NFKC op)
import tensorflow_transform as tft
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_transform.tf_metadata import metadata_io

from test_model import seeded_weights, tiny_hparams
from inference import translate
from trainer_module import devices, export
from trainer_module.hparams import HParams
from trainer_module.model import Transformer
from trainer_module.optimization import token_cross_entropy
from transform_module import preprocessing as pp
from transform_module.tokens import END_ID, PAD_ID, START_ID

SUMS = ("token_nll", "token_correct", "token_count")


def all_at_once(model: Transformer, source_ids: tf.RaggedTensor, references: tf.RaggedTensor,
                hparams: HParams) -> dict[str, np.ndarray]:
    """The sums as Translator.reference_token_stats computed them before chunking (export.py
    at d097de4): every reference of the batch in one model call, none cut."""
    owner = references.value_rowids()
    source = tf.gather(source_ids, owner)[:, :hparams.max_source_length]
    target = references.values
    edge = tf.RaggedTensor.from_tensor(tf.ones([target.nrows(), 1], target.dtype))
    target_in = tf.concat([edge * START_ID, target], axis=1).to_tensor(PAD_ID)
    labels = tf.cast(tf.concat([target, edge * END_ID], axis=1).to_tensor(PAD_ID), tf.int32)
    logits = model((tf.cast(source.to_tensor(PAD_ID), tf.int32),
                    tf.cast(target_in, tf.int32)), training=False)
    weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)

    def per_example(per_token: tf.Tensor) -> np.ndarray:
        return tf.math.unsorted_segment_sum(tf.reduce_sum(per_token * weights, axis=1), owner,
                                            references.nrows()).numpy()

    return {"token_nll": per_example(token_cross_entropy(labels, logits)),
            "token_correct": per_example(correct),
            "token_count": per_example(tf.ones_like(weights))}


def assert_same_sums(got: dict, expected: dict) -> None:
    np.testing.assert_allclose(got["token_nll"], expected["token_nll"], rtol=1e-5)
    for key in ("token_correct", "token_count"):
        np.testing.assert_array_equal(got[key], expected[key])


def random_ids(rng: np.random.Generator, rows: int, longest: int, vocab: int) -> list[list[int]]:
    return [rng.integers(END_ID + 1, vocab, rng.integers(1, longest + 1)).tolist()
            for _ in range(rows)]


@pytest.fixture(scope="module")
def model() -> Transformer:
    model = Transformer(tiny_hparams(tie_output_to_embedding=False))
    model((tf.ones([1, 2], tf.int32), tf.ones([1, 2], tf.int32)))
    seeded_weights(model, seed=2)
    return model


def test_chunks_give_the_sums_of_all_references_at_once(model):
    """150 references in one example (three chunks, the second one shared with the next
    example's), an example without references, sources longer than max_source_length."""
    hparams = model.hparams
    rng = np.random.default_rng(0)
    counts = [150, 0, 30, 1]
    assert sum(counts) > 2 * export.REFERENCE_CHUNK
    sources = tf.ragged.constant(random_ids(rng, len(counts), hparams.max_source_length + 8,
                                            hparams.source_vocab_size), tf.int64)
    references = tf.RaggedTensor.from_row_lengths(tf.ragged.constant(
        random_ids(rng, sum(counts), hparams.max_target_length, hparams.target_vocab_size),
        tf.int64), counts)
    expected = all_at_once(model, sources, references, hparams)
    assert expected["token_correct"][0] > 0  # the comparison is not all zeros
    assert_same_sums({k: v.numpy() for k, v in export.reference_token_sums(
        model, sources, references, hparams).items()}, expected)
    traced = tf.function(lambda s, r: export.reference_token_sums(model, s, r, hparams),
                         autograph=False)
    assert_same_sums({k: v.numpy() for k, v in traced(sources, references).items()}, expected)


def test_a_reference_longer_than_max_target_length_is_cut_without_end(model):
    hparams = dataclasses.replace(model.hparams, max_target_length=10)
    rng = np.random.default_rng(1)
    sources = tf.ragged.constant(random_ids(rng, 2, 8, hparams.source_vocab_size), tf.int64)
    long, short = random_ids(rng, 2, 10, hparams.target_vocab_size)
    long = (long * 40)[:400]  # a 400-token reference
    got = export.reference_token_sums(model, sources, tf.ragged.constant(
        [[long, short], [short]], tf.int64), hparams)

    first = long[:hparams.max_target_length]
    target_in = tf.constant([[START_ID] + first[:-1]], tf.int32)
    logits = model((tf.constant([sources[0].numpy()], tf.int32), target_in), training=False)
    labels = tf.constant([first], tf.int32)
    cut = {"token_nll": float(tf.reduce_sum(token_cross_entropy(labels, logits))),
           "token_correct": float(tf.reduce_sum(tf.cast(tf.equal(
               tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32))),
           "token_count": hparams.max_target_length}
    short_sums = all_at_once(model, sources, tf.ragged.constant([[short], [short]], tf.int64),
                             hparams)
    assert_same_sums({k: v.numpy() for k, v in got.items()},
                     {k: np.array([cut[k] + short_sums[k][0], short_sums[k][1]],
                                  np.float32) for k in SUMS})


@pytest.fixture(scope="module")
def exported_translator(tmp_path_factory):
    """A tiny model with a real (small) Transform graph, exported as the Trainer exports it."""
    words = "chat chien maison voiture arbre rouge bleu vert grand petit".split()
    rows = [{"english": [f"the {a} is {b}."], "french": [f"le {a} est {b} ."]}
            for a in words for b in words]
    analyzed = pp.analyze_in_memory(rows, {"tokenizer": "word", "frequency_threshold": 2})
    # The raw feature spec that the pipeline's Transform writes next to its graph.
    output_dir = os.path.dirname(analyzed.transform_savedmodel_dir)
    metadata_io.write_metadata(tft.DatasetMetadata.from_feature_spec(
        {"english": tf.io.FixedLenFeature([1], tf.string),
         "french": tf.io.VarLenFeature(tf.string)}),
        os.path.join(output_dir, tft.TFTransformOutput.RAW_METADATA_DIR))
    output = tft.TFTransformOutput(output_dir)
    hparams = tiny_hparams(tie_output_to_embedding=False, decode_precision="float32"
                           ).with_vocab_sizes(
        len(export.id_to_token(output, pp.SOURCE_VOCAB)),
        len(export.id_to_token(output, pp.TARGET_VOCAB)))
    model = Transformer(hparams)
    model((tf.ones([1, 2], tf.int32), tf.ones([1, 2], tf.int32)))
    seeded_weights(model, seed=3)
    export_dir = str(tmp_path_factory.mktemp("export"))
    export.export_translator(model, output, hparams, export_dir)
    return model, output, hparams, words, tf.saved_model.load(export_dir)


def example(english: str, french: list[str]) -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "english": tf.train.Feature(bytes_list=tf.train.BytesList(value=[english.encode()])),
        "french": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[f.encode() for f in french]))})).SerializeToString()


def served_sums(loaded, output: tft.TFTransformOutput, words: list[str], seed: int,
                references: int, first: int) -> tuple[dict, dict]:
    """translate_examples of two examples whose random references number `first` and
    `references - first`, and the examples as Transform's graph gives them to the model."""
    rng = np.random.default_rng(seed)
    french = [" ".join(rng.choice(words, rng.integers(1, 12))) + " ." for _ in range(references)]
    records = tf.constant([example("the chat is rouge.", french[:first]),
                           example("the arbre is vert.", french[first:])])
    got = loaded.signatures[export.EXAMPLES_SIGNATURE](examples=records)
    features = output.transform_features_layer()(tf.io.parse_example(
        records, output.raw_feature_spec()))
    return got, {"french": french, **features}


def test_the_exported_signature_sums_many_references_as_all_at_once(exported_translator):
    model, output, hparams, words, loaded = exported_translator
    got, features = served_sums(loaded, output, words, seed=4, references=160, first=150)
    french = features["french"]
    expected = all_at_once(model, features[pp.SOURCE_IDS], features[pp.TARGET_IDS], hparams)
    tokens_and_end = [len(f.split()) + 1 for f in french]
    assert expected["token_count"].tolist() == [sum(tokens_and_end[:150]),
                                                sum(tokens_and_end[150:])]
    assert_same_sums({k: got[k].numpy() for k in SUMS}, expected)
    assert got[export.TRANSLATION].shape == (2,)


@pytest.mark.parametrize("signature", [export.SERVING_SIGNATURE, export.BEAM_SIGNATURE])
def test_each_sentence_of_a_line_is_translated_on_its_own(exported_translator, signature):
    *_, loaded = exported_translator
    translate = loaded.signatures[signature]
    first, second = "the chat is rouge.", "The arbre is vert!"
    alone = translate(english=tf.constant([first, second]))
    line = translate(english=tf.constant(["", f"{first}  {second}", first]))
    assert line[export.TRANSLATION].numpy().tolist() == [
        b"", b" ".join(alone[export.TRANSLATION].numpy()), alone[export.TRANSLATION].numpy()[0]]
    np.testing.assert_allclose(line["score"][1], alone["score"][0] + alone["score"][1],
                               rtol=1e-5)
    assert line["source_tokens"].numpy().tolist() == [
        0, max(alone["source_tokens"].numpy()), alone["source_tokens"].numpy()[0]]
    ids = [[i for i in row if i != PAD_ID] for row in alone["token_ids"].numpy().tolist()]
    assert [i for i in line["token_ids"][1].numpy().tolist() if i != PAD_ID] == ids[0] + ids[1]
    assert END_ID not in line["token_ids"].numpy()


@pytest.mark.parametrize("signature", [export.SERVING_SIGNATURE, export.BEAM_SIGNATURE])
def test_a_long_sentence_is_translated_in_pieces_cut_at_its_clauses(exported_translator,
                                                                     signature):
    *_, hparams, words, loaded = exported_translator
    translate = loaded.signatures[signature]
    # 8 clauses of 5 tokens (the, WORD, is, WORD, ;): 40 tokens, over the limit of 32
    clauses = [f"the {a} is {b}; " for a, b in zip(words[:8], reversed(words[:8]))]
    assert hparams.max_source_length == 32
    sentence = "".join(clauses).strip()
    # packed in order into pieces of at most 32 tokens: 6 clauses (30 tokens), then 2
    pieces = translate(english=tf.constant(["".join(clauses[:6]), "".join(clauses[6:])]))
    whole = translate(english=tf.constant([sentence]))
    assert whole[export.TRANSLATION].numpy()[0] == b" ".join(
        pieces[export.TRANSLATION].numpy())
    assert whole["clause_tokens"].numpy()[0] == 5
    assert whole["source_tokens"].numpy()[0] == 30  # the longest piece translated


def test_a_clause_over_the_limit_is_cut_between_words_and_said_so(exported_translator):
    *_, words, loaded = exported_translator
    sentence = " ".join(words * 4)  # 40 tokens and no boundary
    output = loaded.signatures[export.SERVING_SIGNATURE](english=tf.constant([sentence]))
    assert output["clause_tokens"].numpy()[0] == 40
    assert output["source_tokens"].numpy()[0] <= 32  # translated whole, in two pieces


def test_the_export_tracks_no_keras_object(exported_translator, tmp_path):
    """Saving a tracked Keras object traces functions for Keras' own loader, which no client of
    the signatures reads (half of the export's time, twice: the model, then Transform's Keras
    layer): the translator tracks the model's variables and Transform's loaded graph."""
    model, output, hparams, *_ = exported_translator
    export.export_translator(model, output, hparams, str(tmp_path))
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString((tmp_path / "saved_model.pb").read_bytes())
    kinds = {node.user_object.identifier for node in proto.meta_graphs[0].object_graph_def.nodes
             if node.WhichOneof("kind") == "user_object"}
    assert kinds and not [kind for kind in kinds if "keras" in kind], kinds


@pytest.fixture(scope="module")
def bfloat16_export(exported_translator, tmp_path_factory) -> str:
    """The fixture's model exported with decode_precision=bfloat16."""
    model, output, hparams, *_ = exported_translator
    export_dir = str(tmp_path_factory.mktemp("bfloat16"))
    assert export.export_translator(model, output, dataclasses.replace(
        hparams, decode_precision="bfloat16"), export_dir) == "bfloat16"
    return export_dir


def test_a_bfloat16_export_serves_what_mixed_bfloat16_computes_and_keeps_float32_weights(
        exported_translator, bfloat16_export):
    """decode_precision=bfloat16: the served model's weights are bfloat16 (half the bytes a
    decoding step reads), its sums are a mixed_bfloat16 forward pass's (the training numerics
    on a CPU with bfloat16 units), and the float32 weights stay for continued training."""
    model, output, hparams, words, _ = exported_translator
    loaded = tf.saved_model.load(bfloat16_export)
    assert {v.dtype for v in loaded.model_variables} == {tf.float32}
    assert [v.numpy().tolist() for v in loaded.model_variables] == [
        v.numpy().tolist() for v in model.variables]
    assert tf.bfloat16 in {v.dtype for v in loaded.decoding_variables}

    mixed = Transformer(dataclasses.replace(hparams, precision="mixed_bfloat16"))
    mixed((tf.ones([1, 2], tf.int32), tf.ones([1, 2], tf.int32)))
    mixed.set_weights(model.get_weights())
    # 20 references: one chunk, padded as all_at_once pads them, so the same kernels run.
    got, features = served_sums(loaded, output, words, seed=5, references=20, first=10)
    expected = all_at_once(mixed, features[pp.SOURCE_IDS], features[pp.TARGET_IDS], hparams)
    # Exactly where the CPU has bfloat16 units. Elsewhere TensorFlow emulates bfloat16, and
    # the SavedModel's kernels and the eager ones may sum in other orders: an AVX2-only EPYC
    # differed by one float32 rounding.
    rounding = 0 if devices.cpu_has_bfloat16_units() else 1e-6
    for key in SUMS:
        np.testing.assert_allclose(got[key].numpy(), expected[key], rtol=rounding, atol=0)
    float32_sums = all_at_once(model, features[pp.SOURCE_IDS], features[pp.TARGET_IDS], hparams)
    assert not np.allclose(got["token_nll"].numpy(), float32_sums["token_nll"], rtol=1e-5, atol=0)


@pytest.mark.parametrize("has_units", [True, False])
def test_auto_decode_precision_is_a_probe_of_the_model_where_the_cpu_has_bfloat16_units(
        model, monkeypatch, caplog, has_units):
    """decode_precision "auto": on a CPU with bfloat16 units the probe times the model's own
    decoding steps in both precisions (emulated where the units are only pretended), and the
    export decodes with what it chose; without units, float32 and no probe."""
    monkeypatch.setattr(devices, "cpu_has_bfloat16_units", lambda: has_units)
    with caplog.at_level(logging.INFO, logger="trainer_module.export"):
        decoder = export.decoding_copy(model, "auto")
    [said] = [r.getMessage() for r in caplog.records if "decodes with" in r.getMessage()]
    if not has_units:
        assert decoder is model and "no bfloat16 units" in said
        return
    assert "a probe decoded with them" in said
    chose_bfloat16 = said.startswith("The exported model decodes with bfloat16 weights")
    assert (decoder is not model) is chose_bfloat16
    assert ({v.dtype for v in decoder.variables} >= {tf.bfloat16}) is chose_bfloat16


@pytest.mark.parametrize("has_units", [True, False])
def test_a_bfloat16_export_on_a_cpu_without_bfloat16_units_is_said_to_be_slow(
        bfloat16_export, monkeypatch, caplog, has_units):
    monkeypatch.setattr(devices, "cpu_has_bfloat16_units", lambda: has_units)
    with caplog.at_level(logging.WARNING):
        assert translate.translate(["the chat is rouge."], bfloat16_export)[0]
    warned = [r for r in caplog.records if "bfloat16 units" in r.getMessage()]
    assert len(warned) == (0 if has_units else 1)
    assert all("decode_precision=float32" in r.getMessage() for r in warned)


def test_requests_side_by_side_answer_in_the_input_order(bfloat16_export):
    """translate() with requests side by side: the lines one request at a time gives, in the
    input's order, with a rejected line kept in place, and progress told in order."""
    lines = [f"the {a} is {b}." for a, b in zip("chat chien maison voiture arbre".split(),
                                                 "rouge bleu vert grand petit".split())]
    lines.insert(2, None)
    one_at_a_time = translate.translate(lines, bfloat16_export, batch_size=2)
    told: list[int] = []
    side_by_side = translate.translate(lines, bfloat16_export, batch_size=2,
                                       requests_at_once=3, progress=told.append)
    assert side_by_side == one_at_a_time
    assert side_by_side[2] == "" and all(side_by_side[:2] + side_by_side[3:])
    assert told == [0, 2, 4, 5]


def test_serving_side_by_side_sets_one_thread_per_op_before_tensorflow_starts():
    """serve_side_by_side in a fresh process: one thread per op, an op per core at once, and
    as many requests at once as cores; where TensorFlow has started (here), one request and
    the threads left as they are."""
    probe = ("from inference import translate\n"
             "requests = translate.serve_side_by_side()\n"
             "import os, tensorflow as tf\n"
             "tf.constant(1) + 1\n"  # TensorFlow starts with the threads set
             "print(requests, len(os.sched_getaffinity(0)),\n"
             "      tf.config.threading.get_intra_op_parallelism_threads(),\n"
             "      tf.config.threading.get_inter_op_parallelism_threads())\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=os.path.dirname(os.path.dirname(
                              os.path.abspath(__file__))))
    requests, cores, intra, inter = map(int, done.stdout.split())
    assert (requests, intra, inter) == (cores, 1, cores)

    tf.constant(1) + 1
    threads = (tf.config.threading.get_intra_op_parallelism_threads(),
               tf.config.threading.get_inter_op_parallelism_threads())
    assert translate.serve_side_by_side() == 1
    assert (tf.config.threading.get_intra_op_parallelism_threads(),
            tf.config.threading.get_inter_op_parallelism_threads()) == threads
