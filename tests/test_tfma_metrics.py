"""CorpusBleu / CorpusChrf: exact sacreBLEU parity, mergeable accumulators, real TFMA runs."""
from __future__ import annotations

import json
import logging

import pickle
import random
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sacrebleu
import tensorflow as tf
import tensorflow_model_analysis as tfma
from apache_beam.internal import pickler
from tensorflow_model_analysis.api import types as tfma_types
from tensorflow_model_analysis.metrics import metric_specs
from tensorflow_model_analysis.metrics import metric_types

from components import tfma_metrics, token_metrics
from pipeline.eval_config import make_eval_config
from components.tfma_metrics import CorpusBleu, CorpusChrf

MODULE = 'components.tfma_metrics'
TOL = 1e-9


# ---------------------------------------------------------------- fixtures

def _random_corpus(seed: int, n: int = 60):
    """Sentences over a small vocabulary so that 1..4-gram matches are frequent."""
    rng = random.Random(seed)
    vocab = ('le chat chien est sur la table tapis il elle a mangé une pomme '
             'très beau temps aujourd\'hui ça garçon être où . , ! ?').split()

    def sentence():
        return ' '.join(rng.choice(vocab) for _ in range(rng.randint(0, 12)))

    hyps, refs = [], []
    for _ in range(n):
        ref_list = [sentence() or 'vide .' for _ in range(rng.randint(1, 5))]
        hyp = rng.choice([sentence(), ref_list[0], ''])
        hyps.append(hyp)
        refs.append(ref_list)
    return hyps, refs


FIXTURES = {
    'multi_reference': (
        ['Le chat est sur le tapis.', 'Il a mangé une pomme.',
         'Je ne sais pas.'],
        [['Le chat est assis sur le tapis.', 'Un chat est sur le tapis.'],
         ['Il a mangé une pomme.', 'Il mangeait une pomme.'],
         ['Je sais pas.', "Je n'en sais rien.", 'Aucune idée.']]),
    'variable_reference_counts': (
        ['Bonjour', 'Où est la gare ?', 'Merci beaucoup !', 'Viens ici.',
         'Il pleut.'],
        [['Bonjour !'],
         ['Où se trouve la gare ?', 'Où est la gare ?', 'La gare, où est-elle ?',
          'Où est la station ?', 'Dites-moi où est la gare.'],
         ['Merci beaucoup !', 'Merci bien !'],
         ['Viens ici !', 'Venez ici.', 'Approche.'],
         ['Il pleut.']]),
    'empty_hypotheses': (
        ['', 'Le chien dort.', '', 'Nous sommes partis.'],
        [['Rien.'], ['Le chien dort.', 'Le chien est endormi.'],
         ['Vide', 'Vraiment vide'], ['Nous sommes partis.']]),
    'all_hypotheses_empty': (['', ''], [['Un.'], ['Deux.', 'Trois.']]),
    'unicode_accents': (
        ['Ça, c\'est un garçon très « sûr » de lui… 😀',
         'L\'œuvre d\'été à Noël : déjà vue.', 'Où êtes-vous ?'],
        [['Ça, c\'est un garçon très sûr de lui… 😀', 'C\'est un garçon « sûr » de lui.'],
         ['L\'œuvre d\'été à Noël : déjà vue !'],
         ['Où êtes-vous ?', 'Vous êtes où ?']]),
    'random_corpus': _random_corpus(seed=7),
}


def _ref_streams(refs):
    """sacreBLEU's layout: one stream per reference slot, None where missing."""
    width = max(len(r) for r in refs)
    return [[r[i] if i < len(r) else None for r in refs] for i in range(width)]


def _expected(kind, hyps, refs):
    fn = sacrebleu.corpus_bleu if kind == 'bleu' else sacrebleu.corpus_chrf
    return fn(hyps, _ref_streams(refs)).score


class _Chained:
    """A metric's preprocessor and combiner chained as TFMA chains them (the preprocessor's
    output per example is the combiner's input), with the combiner's interface."""

    def __init__(self, computation: metric_types.MetricComputation):
        (self.preprocessor,) = computation.preprocessors
        self.combiner = computation.combiner
        self._key = self.combiner._key

    def create_accumulator(self):
        return self.combiner.create_accumulator()

    def add_input(self, accumulator, element):
        (stats,) = self.preprocessor.process(element)
        return self.combiner.add_input(accumulator, stats)

    def merge_accumulators(self, accumulators):
        return self.combiner.merge_accumulators(accumulators)

    def extract_output(self, accumulator):
        return self.combiner.extract_output(accumulator)


def _combiner(metric, **eval_config_kwargs) -> _Chained:
    computations = metric.computations(
        eval_config=tfma.EvalConfig(**eval_config_kwargs))
    assert len(computations) == 1
    return _Chained(computations[0])


def _inputs(prediction, label):
    return metric_types.StandardMetricInputs(labels=label, predictions=prediction)


def _score(combiner, elements):
    acc = combiner.create_accumulator()
    for element in elements:
        acc = combiner.add_input(acc, element)
    (value,) = combiner.extract_output(acc).values()
    return value


METRICS = {'bleu': CorpusBleu, 'chrf': CorpusChrf}


# ---------------------------------------------------------------- parity

@pytest.mark.parametrize('as_bytes', [False, True], ids=['str', 'bytes'])
@pytest.mark.parametrize('fixture', sorted(FIXTURES))
@pytest.mark.parametrize('kind', sorted(METRICS))
def test_matches_sacrebleu_corpus_score(kind, fixture, as_bytes):
    hyps, refs = FIXTURES[fixture]
    enc = (lambda s: s.encode('utf-8')) if as_bytes else (lambda s: s)
    # Labels as the Evaluator feeds them: a 1-D object array of every reference.
    elements = [
        _inputs(np.array([enc(h)], dtype=object),
                np.array([enc(r) for r in rs], dtype=object))
        for h, rs in zip(hyps, refs)
    ]
    value = _score(_combiner(METRICS[kind]()), elements)
    assert type(value) is float  # pylint: disable=unidiomatic-typecheck
    expected = _expected(kind, hyps, refs)
    assert value == pytest.approx(expected, abs=TOL)
    if fixture not in ('all_hypotheses_empty',):
        assert value > 0.0  # the fixture is meaningful, not 0 == 0


def test_non_default_sacrebleu_options_are_honoured():
    hyps, refs = FIXTURES['random_corpus']
    elements = [_inputs(h, rs) for h, rs in zip(hyps, refs)]
    streams = _ref_streams(refs)
    bleu = _score(_combiner(CorpusBleu(lowercase=True, smooth_method='floor',
                                       smooth_value=0.2)), elements)
    assert bleu == pytest.approx(sacrebleu.corpus_bleu(
        hyps, streams, lowercase=True, smooth_method='floor',
        smooth_value=0.2).score, abs=TOL)
    chrf_pp = _score(_combiner(CorpusChrf(word_order=2)), elements)
    assert chrf_pp == pytest.approx(
        sacrebleu.corpus_chrf(hyps, streams, word_order=2).score, abs=TOL)
    assert chrf_pp != pytest.approx(_score(_combiner(CorpusChrf()), elements))


@pytest.mark.parametrize('kind', sorted(METRICS))
def test_max_references_one_scores_against_the_first_reference(kind):
    hyps, refs = FIXTURES['random_corpus']
    elements = [_inputs(h, rs) for h, rs in zip(hyps, refs)]
    value = _score(_combiner(METRICS[kind](max_references=1)), elements)
    assert value == pytest.approx(_expected(kind, hyps, [rs[:1] for rs in refs]), abs=TOL)
    assert value < _score(_combiner(METRICS[kind]()), elements)  # the others counted before


def test_measures_scored_in_turn_on_each_example_keep_their_own_statistics():
    """TFMA runs every measure's preprocessor on an example before the next example, and a
    sentence of one reference gets the same statistics from the single- and the
    all-references measure (reused, not computed twice): each measure's score is still its
    own, with its own options."""
    hyps, refs = FIXTURES['random_corpus']
    refs = [rs if i % 2 else rs[:1] for i, rs in enumerate(refs)]  # one reference, or several
    measures = {
        'bleu': (CorpusBleu(), _expected('bleu', hyps, refs)),
        'bleu_1ref': (CorpusBleu(max_references=1), _expected('bleu', hyps, [r[:1] for r in refs])),
        'bleu_lowercase': (CorpusBleu(lowercase=True), sacrebleu.corpus_bleu(
            hyps, _ref_streams(refs), lowercase=True).score),
        'chrf': (CorpusChrf(), _expected('chrf', hyps, refs)),
        'chrf_1ref': (CorpusChrf(max_references=1), _expected('chrf', hyps, [r[:1] for r in refs])),
    }
    combiners = {name: _combiner(metric) for name, (metric, _) in measures.items()}
    totals = {name: c.create_accumulator() for name, c in combiners.items()}
    for hyp, rs in zip(hyps, refs):
        for name, combiner in combiners.items():
            totals[name] = combiner.add_input(totals[name], _inputs(hyp, rs))
    for name, (_, expected) in measures.items():
        (value,) = combiners[name].extract_output(totals[name]).values()
        assert value == pytest.approx(expected, abs=TOL), name


def test_one_dimensional_label_is_all_references_of_one_example():
    # TFMA's built-in Bleu scores this 0.0; both refs must count for one sentence.
    combiner = _combiner(CorpusBleu())
    label = np.array([b'the cat sat on the mat', b'a cat is on the mat'], dtype=object)
    value = _score(combiner, [_inputs(b'a cat is on the mat', label)])
    assert value == pytest.approx(100.0)
    assert value == pytest.approx(sacrebleu.corpus_bleu(
        ['a cat is on the mat'],
        [['the cat sat on the mat'], ['a cat is on the mat']]).score, abs=TOL)


def test_empty_string_reference_is_a_reference_unless_ignored():
    # The empty reference is the closest in length to the short first hypothesis,
    # so it removes BLEU's brevity penalty.
    long_ref = 'le chat est sur le tapis rouge et bleu ce matin'
    hyps = ['le chat est sur le', 'un chien noir dort sur le canapé']
    label_with_empty = [[long_ref.encode(), b''], [b'un chien noir dort sur le canape']]
    second = 'un chien noir dort sur le canape'
    # sacreBLEU drops None but keeps '' as an (empty) reference.
    with_empty = sacrebleu.corpus_bleu(hyps, [[long_ref, second], ['', None]]).score
    without = sacrebleu.corpus_bleu(hyps, [[long_ref, second]]).score
    assert without > 0.0
    assert with_empty != pytest.approx(without)
    elements = [_inputs(h.encode(), rs) for h, rs in zip(hyps, label_with_empty)]
    assert _score(_combiner(CorpusBleu()), elements) == pytest.approx(with_empty, abs=TOL)
    assert _score(_combiner(CorpusBleu(ignore_empty_references=True)),
                  elements) == pytest.approx(without, abs=TOL)
    # None entries are sacreBLEU's "missing reference" and are always dropped.
    none_padded = [_inputs(h, rs) for h, rs in
                   zip(hyps, [[long_ref, None], [None, second]])]
    assert _score(_combiner(CorpusBleu()), none_padded) == pytest.approx(without, abs=TOL)


# ---------------------------------------------------------------- input forms

REFS = ['Où est la gare ?', 'La gare, où est-elle ?']
REFS_B = [r.encode('utf-8') for r in REFS]


def _label_forms():
    return {
        'list_str': list(REFS),
        'list_bytes': list(REFS_B),
        'tuple_bytes': tuple(REFS_B),
        'object_array_1d': np.array(REFS_B, dtype=object),
        'object_array_2d_row': np.array([REFS_B], dtype=object),
        'object_array_2d_col': np.array([[r] for r in REFS_B], dtype=object),
        'fixed_bytes_array': np.array(REFS_B),  # dtype 'S'
        'unicode_array': np.array(REFS),  # dtype '<U'
        'tf_sparse': tf.sparse.SparseTensor(indices=[[0, 0], [0, 1]],
                                            values=tf.constant(REFS_B),
                                            dense_shape=[1, 2]),
        'tf_ragged': tf.ragged.constant([REFS_B]),
        'tf_dense': tf.constant(REFS_B),
        'tfma_varlen': tfma_types.VarLenTensorValue(
            values=np.array(REFS_B, dtype=object),
            indices=np.array([[0, 0], [0, 1]]), dense_shape=np.array([1, 2])),
        'tfma_sparse': tfma_types.SparseTensorValue(
            values=np.array(REFS_B, dtype=object),
            indices=np.array([[0, 0], [0, 1]]), dense_shape=np.array([1, 2])),
        'tfma_ragged': tfma_types.RaggedTensorValue(
            values=np.array(REFS_B, dtype=object),
            nested_row_splits=[np.array([0, 2])]),
    }


HYP = 'Où est la gare ?'


def _prediction_forms():
    hb = HYP.encode('utf-8')
    return {
        'str': HYP,
        'bytes': hb,
        'np_bytes': np.bytes_(hb),
        'np_str': np.str_(HYP),
        'object_array_1': np.array([hb], dtype=object),
        'object_array_0d': np.array(hb, dtype=object),
        'object_array_1x1': np.array([[hb]], dtype=object),
        'list_1': [hb],
        'tf_tensor': tf.constant([hb]),
        'dict_translation': {'translation': np.array([hb], dtype=object),
                             'length': np.array([17])},
        'dict_single_other_key': {'output_0': np.array([hb], dtype=object)},
    }


@pytest.mark.parametrize('kind', sorted(METRICS))
def test_all_input_forms_give_identical_statistics(kind):
    combiner = _combiner(METRICS[kind]())
    expected = combiner.add_input(combiner.create_accumulator(), _inputs(HYP, REFS))
    reference = _expected(kind, [HYP], [REFS])
    assert combiner.extract_output(expected)[combiner._key] == pytest.approx(reference, abs=TOL)
    for name, label in _label_forms().items():
        acc = combiner.add_input(combiner.create_accumulator(), _inputs(HYP, label))
        assert acc == expected, name
    for name, prediction in _prediction_forms().items():
        acc = combiner.add_input(combiner.create_accumulator(), _inputs(prediction, REFS_B))
        assert acc == expected, name


def test_prediction_key_from_metric_config_and_model_spec():
    prediction = {'hyp': np.array([HYP.encode()], dtype=object),
                  'translation': np.array([b'autre chose'], dtype=object)}
    expected = sacrebleu.corpus_bleu([HYP], _ref_streams([REFS])).score
    other = sacrebleu.corpus_bleu(['autre chose'], _ref_streams([REFS])).score
    assert _score(_combiner(CorpusBleu(prediction_key='hyp')),
                  [_inputs(prediction, REFS)]) == pytest.approx(expected, abs=TOL)
    assert _score(_combiner(CorpusBleu(), model_specs=[tfma.ModelSpec(prediction_key='hyp')]),
                  [_inputs(prediction, REFS)]) == pytest.approx(expected, abs=TOL)
    # Default: 'translation'.
    assert _score(_combiner(CorpusBleu()),
                  [_inputs(prediction, REFS)]) == pytest.approx(other, abs=TOL)


def test_invalid_inputs_raise():
    combiner = _combiner(CorpusBleu())
    acc = combiner.create_accumulator()
    with pytest.raises(ValueError, match='no reference'):
        combiner.add_input(acc, _inputs(HYP, np.array([], dtype=object)))
    with pytest.raises(ValueError, match='no reference'):
        combiner.add_input(acc, _inputs(HYP, None))
    with pytest.raises(ValueError, match='no reference'):
        combiner.add_input(acc, _inputs(HYP, [None, None]))
    with pytest.raises(ValueError, match='exactly one translation'):
        combiner.add_input(acc, _inputs(np.array([b'a', b'b'], dtype=object), REFS))
    with pytest.raises(ValueError, match='prediction_key'):
        combiner.add_input(acc, _inputs({'a': b'x', 'b': b'y'}, REFS))
    with pytest.raises(UnicodeDecodeError):
        combiner.add_input(acc, _inputs(b'\xff\xfe', REFS))
    with pytest.raises(TypeError):
        combiner.add_input(acc, _inputs(np.array([1.5]), REFS))


# ---------------------------------------------------------------- merging

@pytest.mark.parametrize('kind', sorted(METRICS))
def test_merging_partitions_in_any_grouping_is_exact(kind):
    hyps, refs = _random_corpus(seed=11, n=80)
    elements = [_inputs(h.encode(), [r.encode() for r in rs]) for h, rs in zip(hyps, refs)]
    combiner = _combiner(METRICS[kind]())
    single_pass = _score(combiner, elements)
    assert single_pass == pytest.approx(_expected(kind, hyps, refs), abs=TOL)
    assert single_pass > 0.0

    rng = random.Random(3)
    for n_workers in (1, 2, 3, 5, 8, 80):
        for _ in range(3):
            order = list(range(len(elements)))
            rng.shuffle(order)  # corpus order must not matter either
            cuts = sorted(rng.sample(range(1, len(order)), n_workers - 1))
            parts = [order[a:b] for a, b in zip([0] + cuts, cuts + [len(order)])]
            # Each "worker" runs in its own (pickled) copy of the combiner, as on Beam.
            accs = []
            for part in parts:
                worker = pickler.loads(pickler.dumps(combiner))
                acc = worker.create_accumulator()
                for i in part:
                    acc = worker.add_input(acc, elements[i])
                accs.append(pickle.loads(pickle.dumps(acc)))
            accs.append(combiner.create_accumulator())  # an empty worker
            # Merge in a random tree shape.
            while len(accs) > 1:
                k = rng.randint(2, len(accs))
                group = [accs.pop(rng.randrange(len(accs))) for _ in range(k)]
                accs.append(combiner.merge_accumulators(group))
            (merged,) = combiner.extract_output(accs[0]).values()
            assert merged == single_pass, (n_workers, parts)


def test_empty_corpus_and_empty_merge_score_zero():
    for metric in (CorpusBleu(), CorpusChrf()):
        combiner = _combiner(metric)
        assert combiner.extract_output(combiner.create_accumulator()) == {combiner._key: 0.0}
        merged = combiner.merge_accumulators([])
        assert combiner.extract_output(merged) == {combiner._key: 0.0}


def metric_config(class_name: str, **config: Any) -> tfma.MetricConfig:
    """A MetricConfig for CorpusBleu / CorpusChrf of components.tfma_metrics: the kwargs
    become the metric's constructor arguments, as TFMA passes them."""
    return tfma.MetricConfig(class_name=class_name, module=MODULE,
                             config=json.dumps(config) if config else '')


def test_metric_config_deserialises_with_options_and_name():
    config = metric_config('CorpusBleu', name='bleu_lc', lowercase=True, prediction_key='hyp')
    assert config.module == MODULE
    instance = metric_specs.metric_instance(config)
    assert isinstance(instance, CorpusBleu)
    assert instance.name == 'bleu_lc'
    assert instance.get_config()['lowercase'] is True
    assert isinstance(metric_specs.metric_instance(tfma.MetricConfig(
        class_name='CorpusChrf', module=MODULE, config='"word_order": 2')), CorpusChrf)
    (computation,) = instance.computations(
        eval_config=tfma.EvalConfig(), model_names=['candidate'])
    assert computation.keys == [metric_types.MetricKey(name='bleu_lc', model_name='candidate')]


# ---------------------------------------------------------------- real TFMA runs

def _value_threshold(lower):
    return tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={'value': lower}))


def _change_threshold(min_improvement):
    return tfma.MetricThreshold(change_threshold=tfma.GenericChangeThreshold(
        direction=tfma.MetricDirection.HIGHER_IS_BETTER,
        absolute={'value': min_improvement}))


def _failures(validation):
    return sorted(
        (f.metric_key.name, f.metric_key.model_name, f.metric_key.is_diff)
        for per_slice in validation.metric_validations_per_slice
        for f in per_slice.failures)


def _metrics_by_slice(output_path):
    result = {}
    for metrics_for_slice in tfma.load_metrics(output_path):
        slice_key = tuple((c.column, c.bytes_value.decode())
                          for c in metrics_for_slice.slice_key.single_slice_keys)
        for kv in metrics_for_slice.metric_keys_and_values:
            key = (kv.key.name, kv.key.model_name, kv.key.is_diff)
            assert kv.value.WhichOneof('type') == 'double_value', kv
            result.setdefault(slice_key, {})[key] = kv.value.double_value.value
    return result


RAW_HYPS = ['Le chat est sur le tapis.', '', "Il fait très beau aujourd'hui !",
            'Bonjour', 'Où est la gare ?', 'Je ne sais pas.']
RAW_REFS = [
    ['Le chat est assis sur le tapis.', 'Un chat est sur le tapis.'],
    ['Rien.'],
    ["Il fait très beau aujourd'hui.", 'Quel beau temps !',
     "Le temps est magnifique aujourd'hui."],
    ['Bonjour !'],
    ['Où se trouve la gare ?', 'Où est la gare ?', 'La gare, où est-elle ?',
     'Où est la station ?', 'Dites-moi où est la gare.'],
    ['Je sais pas.', "Je n'en sais rien."],
]
RAW_GROUPS = ['a', 'a', 'b', 'b', 'b', 'a']


@pytest.mark.parametrize('passing', [True, False], ids=['passes', 'fails'])
def test_analyze_raw_data_value_thresholds(tmp_path, passing, monkeypatch):
    """TFMA end to end on a DataFrame: bytes prediction column, VarLen bytes labels; each
    example's statistics computed once per metric, though it is in two slices."""
    segments = []
    segment = tfma_metrics.CorpusStatistics.segment
    monkeypatch.setattr(tfma_metrics.CorpusStatistics, 'segment',
                        lambda self, *args: segments.append(self.kind) or segment(self, *args))
    bleu = _expected('bleu', RAW_HYPS, RAW_REFS)
    chrf = _expected('chrf', RAW_HYPS, RAW_REFS)
    df = pd.DataFrame({
        'prediction': [h.encode() for h in RAW_HYPS],
        'french': [[r.encode() for r in rs] for rs in RAW_REFS],
        'group': RAW_GROUPS,
    })
    margin = -0.01 if passing else 0.01  # bound just below / just above the value

    def on_overall_slice(threshold):  # the per-group slices have their own scores
        return [tfma.PerSliceMetricThreshold(slicing_specs=[tfma.SlicingSpec()],
                                             threshold=threshold)]

    config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(prediction_key='prediction', label_key='french')],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name='CorpusBleu', module=MODULE,
                              per_slice_thresholds=on_overall_slice(
                                  _value_threshold(bleu + margin))),
            metric_config('CorpusChrf'),
        ])],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=['group'])])
    config.metrics_specs[0].metrics[1].per_slice_thresholds.extend(
        on_overall_slice(_value_threshold(chrf - 0.01)))
    output = str(tmp_path)
    tfma.analyze_raw_data(df, config, output_path=output)

    assert sorted(segments) == ['bleu'] * len(RAW_HYPS) + ['chrf'] * len(RAW_HYPS)
    metrics = _metrics_by_slice(output)
    assert metrics[()][('corpus_bleu', '', False)] == pytest.approx(bleu, abs=TOL)
    assert metrics[()][('corpus_chrf', '', False)] == pytest.approx(chrf, abs=TOL)
    for group in ('a', 'b'):  # per-slice values are corpus scores of the slice
        idx = [i for i, g in enumerate(RAW_GROUPS) if g == group]
        sub = ([RAW_HYPS[i] for i in idx], [RAW_REFS[i] for i in idx])
        got = metrics[(('group', group),)]
        assert got[('corpus_bleu', '', False)] == pytest.approx(_expected('bleu', *sub), abs=TOL)
        assert got[('corpus_chrf', '', False)] == pytest.approx(_expected('chrf', *sub), abs=TOL)

    validation = tfma.load_validation_result(output)
    assert validation.validation_ok is passing
    if passing:
        assert not _failures(validation)
    else:
        assert _failures(validation) == [('corpus_bleu', '', False)]
        (failed_slice,) = validation.metric_validations_per_slice
        assert not failed_slice.slice_key.single_slice_keys  # the overall slice
        assert failed_slice.failures[0].metric_value.double_value.value == pytest.approx(
            bleu, abs=TOL)


class _LookupTranslator(tf.Module):
    """A stand-in translator: serving signature over serialized tf.Examples
    returning a dict with a string 'translation' output (and another output)."""

    def __init__(self, table):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(table)), tf.constant(list(table.values()))),
            default_value='')

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='examples')])
    def serve(self, examples):
        features = tf.io.parse_example(
            examples, {'english': tf.io.FixedLenFeature([], tf.string)})
        translation = self.table.lookup(features['english'])
        return {'translation': translation, 'length': tf.strings.length(translation)}


EN = ['the cat', 'nothing', 'weather', 'hello', 'station', 'dunno']
CANDIDATE = dict(zip(EN, RAW_HYPS))
BASELINE = dict(zip(EN, ['Un chat.', 'Rien', 'Beau temps', 'Salut', 'Gare ?', 'Non.']))


@pytest.fixture(scope='module')
def saved_models_and_data(tmp_path_factory):
    root = tmp_path_factory.mktemp('tfma_models')
    paths = {}
    for name, table in (('candidate', CANDIDATE), ('baseline', BASELINE)):
        module = _LookupTranslator(table)
        paths[name] = str(root / name)
        tf.saved_model.save(module, paths[name], signatures={'serving_default': module.serve})
    data = str(root / 'examples.tfrecord')
    with tf.io.TFRecordWriter(data) as writer:
        for en, refs in zip(EN, RAW_REFS):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                'english': tf.train.Feature(bytes_list=tf.train.BytesList(value=[en.encode()])),
                'french': tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[r.encode() for r in refs])),
            })).SerializeToString())
    return paths, data


@pytest.mark.parametrize('passing', [True, False], ids=['passes', 'fails'])
def test_run_model_analysis_with_baseline_value_and_change_thresholds(
    tmp_path, saved_models_and_data, passing):
    """The Evaluator's path: saved models, tf.Examples, label_key='french'."""
    paths, data = saved_models_and_data
    base_hyps = [BASELINE[e] for e in EN]
    expected = {k: _expected(k, RAW_HYPS, RAW_REFS) for k in METRICS}
    baseline = {k: _expected(k, base_hyps, RAW_REFS) for k in METRICS}
    assert all(expected[k] > baseline[k] for k in METRICS)
    diff = {k: expected[k] - baseline[k] for k in METRICS}
    margin = -0.01 if passing else 0.01

    def thresholds(value, change):
        t = tfma.MetricThreshold()
        t.value_threshold.CopyFrom(_value_threshold(value).value_threshold)
        t.change_threshold.CopyFrom(_change_threshold(change).change_threshold)
        return t

    config = tfma.EvalConfig(
        model_specs=[
            tfma.ModelSpec(name='candidate', signature_name='serving_default',
                           label_key='french'),
            tfma.ModelSpec(name='baseline', signature_name='serving_default',
                           label_key='french', is_baseline=True),
        ],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            # Fails (when failing) on the value threshold only.
            tfma.MetricConfig(class_name='CorpusBleu', module=MODULE,
                              threshold=thresholds(expected['bleu'] + margin,
                                                   diff['bleu'] - 0.01)),
            # Fails (when failing) on the change threshold only.
            tfma.MetricConfig(class_name='CorpusChrf', module=MODULE,
                              config='"prediction_key": "translation"',
                              threshold=thresholds(expected['chrf'] - 0.01,
                                                   diff['chrf'] + margin)),
        ])],
        slicing_specs=[tfma.SlicingSpec()])
    models = [
        tfma.default_eval_shared_model(paths[name], eval_config=config, model_name=name)
        for name in ('candidate', 'baseline')
    ]
    output = str(tmp_path)
    tfma.run_model_analysis(eval_shared_model=models, eval_config=config,
                            data_location=data, output_path=output)

    metrics = _metrics_by_slice(output)[()]
    for kind, name in (('bleu', 'corpus_bleu'), ('chrf', 'corpus_chrf')):
        assert metrics[(name, 'candidate', False)] == pytest.approx(expected[kind], abs=TOL)
        assert metrics[(name, 'baseline', False)] == pytest.approx(baseline[kind], abs=TOL)
        assert metrics[(name, 'candidate', True)] == pytest.approx(diff[kind], abs=TOL)

    validation = tfma.load_validation_result(output)
    assert validation.validation_ok is passing
    assert _failures(validation) == ([] if passing else [
        ('corpus_bleu', 'candidate', False), ('corpus_chrf', 'candidate', True)])


def _token_combiner(metric_class):
    (computation,) = metric_class().computations()
    return computation.combiner, computation.keys[0]


def test_token_accuracy_and_perplexity_are_exact_corpus_ratios_on_any_partition():
    per_example = [(2.0, 1.0, 3.0), (10.0, 4.0, 5.0), (0.5, 2.0, 2.0), (7.0, 0.0, 4.0)]
    elements = [metric_types.StandardMetricInputs(predictions={
        'translation': np.array([b'x']), 'token_nll': np.array([nll]),
        'token_correct': np.array([correct]), 'token_count': np.array([count])})
        for nll, correct, count in per_example]
    nll, correct, count = (sum(column) for column in zip(*per_example))
    expected = {token_metrics.TokenAccuracy: correct / count,
                token_metrics.Perplexity: float(np.exp(nll / count))}
    for metric_class, value in expected.items():
        combiner, key = _token_combiner(metric_class)
        parts = []
        for chunk in (elements[:1], elements[1:3], elements[3:], []):
            accumulator = combiner.create_accumulator()
            for element in chunk:
                accumulator = combiner.add_input(accumulator, element)
            parts.append(accumulator)
        merged = combiner.merge_accumulators(parts)
        assert combiner.extract_output(merged)[key] == pytest.approx(value, rel=1e-12)


def test_token_metrics_of_a_model_without_the_sums_are_nan_with_a_warning(caplog):
    """A baseline exported before the token sums existed must not fail the evaluation."""
    combiner, key = _token_combiner(token_metrics.TokenAccuracy)
    with_sums = metric_types.StandardMetricInputs(predictions={
        'translation': np.array([b'x']), 'token_nll': np.array([1.0]),
        'token_correct': np.array([1.0]), 'token_count': np.array([2.0])})
    without = metric_types.StandardMetricInputs(predictions=np.array([b'x']))
    accumulator = combiner.create_accumulator()
    for element in (with_sums, without):
        accumulator = combiner.add_input(accumulator, element)
    with caplog.at_level(logging.WARNING):
        assert np.isnan(combiner.extract_output(accumulator)[key])
    assert "1 examples lack the model outputs token_nll" in caplog.text
    only_sums = combiner.add_input(combiner.create_accumulator(), with_sums)
    assert combiner.extract_output(only_sums)[key] == 0.5


def test_pipeline_gate_judges_the_whole_split_not_each_slice(tmp_path, saved_models_and_data):
    """The pipeline's thresholds (make_eval_config) bless a candidate that is better overall
    though worse on one small slice: tiny length buckets are reported, not gated on."""
    paths, data = saved_models_and_data
    gate = make_eval_config(min_bleu=0.0, max_drop=0.0)
    config = tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(name='candidate', label_key='french'),
                     tfma.ModelSpec(name='baseline', label_key='french', is_baseline=True)],
        metrics_specs=gate.metrics_specs,
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=['english'])])
    models = [tfma.default_eval_shared_model(paths[name], eval_config=config, model_name=name)
              for name in ('candidate', 'baseline')]
    output = str(tmp_path)
    tfma.run_model_analysis(eval_shared_model=models, eval_config=config,
                            data_location=data, output_path=output)
    metrics = _metrics_by_slice(output)
    worse_slice = metrics[(('english', 'nothing'),)]  # '' vs the baseline's 'Rien'
    assert worse_slice[('corpus_chrf', 'candidate', True)] < 0
    assert metrics[()][('corpus_chrf', 'candidate', True)] > 0
    assert tfma.load_validation_result(output).validation_ok
