"""Corpus-level BLEU and chrF as TFMA metrics the TFX Evaluator can gate on.

TFMA 0.47's built-in ``Bleu`` returns a sacrebleu ``BLEUScore`` object (so value
and change thresholds cannot use it), scores 1-D labels as 0.0 and raises on
bytes. The metrics here return a plain ``float`` on sacreBLEU's 0-100 scale and
are exact at corpus level on any number of Beam workers: each example adds
sacreBLEU's own per-segment sufficient statistics (computed by sacreBLEU's
``BLEU`` / ``CHRF`` objects, so tokenisation (13a) and maths are sacreBLEU's;
computed once per example by a TFMA preprocessor, whatever the number of slices
the example falls in), accumulators merge by summing those integer statistics,
and the score is computed once, from the summed statistics, in
``extract_output``. The result equals
``sacrebleu.corpus_bleu(hyps, ref_streams).score`` (resp. ``corpus_chrf``)
where ``ref_streams`` are the per-example references padded with ``None`` to
the largest reference count.

Inputs, per example (TFMA feeds preprocessors one unbatched example at a time):

* prediction: the translation, ``bytes`` or ``str`` (numpy scalars, 0-d or
  one-element arrays/lists accepted). If the model's output is a dict, the
  value under ``prediction_key`` is used (metric config), else under
  ``ModelSpec.prediction_key``, else under ``'translation'``, else the dict's
  only entry.
* label: every reference translation of that example (the raw VarLen
  ``french`` feature via ``ModelSpec.label_key='french'``): a list / 1-D array
  / sparse / ragged value of ``bytes`` or ``str``; all its values are the
  references of this ONE example. ``None`` entries are dropped (sacreBLEU's
  "missing reference"); an empty string is a real, empty, reference, as in
  sacreBLEU (``ignore_empty_references=True`` drops those too). An example
  with no reference at all raises ``ValueError``. ``max_references=N`` keeps
  the first N (1: single-reference scores, as published results are).

Bytes are decoded as UTF-8. Example weights are not supported (corpus BLEU has
no notion of them); TFMA raises if a MetricsSpec asks for weighted metrics.

Usage in an EvalConfig::

    tfma.MetricConfig(
        class_name='CorpusBleu', module='components.tfma_metrics',
        threshold=tfma.MetricThreshold(
            value_threshold=tfma.GenericValueThreshold(lower_bound={'value': 20.0})))
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional

import apache_beam as beam
import numpy as np
import sacrebleu
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2

CORPUS_BLEU_NAME = 'corpus_bleu'
CORPUS_CHRF_NAME = 'corpus_chrf'
# The same against one fixed reference per sentence (the first in file order): the way
# published MT results are scored, and so comparable with them (max_references=1).
CORPUS_BLEU_1REF_NAME = 'corpus_bleu_1ref'
CORPUS_CHRF_1REF_NAME = 'corpus_chrf_1ref'
DEFAULT_PREDICTION_KEY = 'translation'

_Stats = List[int]
# The statistics of the last segments scored, by metric, options and text. The single-reference
# measures (the gate's) and the all-references ones score the same pair wherever a sentence
# has one reference, as most of fra.txt's have, and TFMA runs their preprocessors one after
# the other on each example: sacreBLEU's statistics are most of the Evaluator's Python time.
_RECENT_SEGMENTS: Dict[tuple, _Stats] = {}
_RECENT_SEGMENTS_KEPT = 64


# --------------------------------------------------------------------------
# Input normalisation
# --------------------------------------------------------------------------

def _to_text(value: Any, what: str) -> str:
    if isinstance(value, bytes):  # includes np.bytes_
        return bytes(value).decode('utf-8')
    if isinstance(value, str):  # includes np.str_
        return str(value)
    raise TypeError(f'{what} must be bytes or str, got {type(value).__name__}: '
                    f'{value!r}')


def _flatten_strings(value: Any, out: list) -> list:
    """Appends every leaf of value (nested lists/arrays/sparse/ragged) to out."""
    if value is None:
        out.append(None)
    elif isinstance(value, (bytes, str)):
        out.append(value)
    elif isinstance(value, Mapping):
        raise TypeError(f'expected strings, got a dict with keys {sorted(value)}')
    elif isinstance(value, np.ndarray):
        if value.ndim == 0:
            out.append(value.item())
        else:
            for item in value.reshape(-1):
                _flatten_strings(item, out)
    elif hasattr(value, 'flat_values'):  # tf.RaggedTensor
        _flatten_strings(value.flat_values, out)
    elif hasattr(value, 'values') and (
        hasattr(value, 'indices') or hasattr(value, 'nested_row_splits')):
        # tf.SparseTensor, tf.compat.v1.SparseTensorValue and TFMA's
        # SparseTensorValue / VarLenTensorValue / RaggedTensorValue: the values
        # (row-major) are the strings.
        _flatten_strings(value.values, out)
    elif hasattr(value, 'numpy') and callable(value.numpy):  # eager tf.Tensor
        _flatten_strings(value.numpy(), out)
    elif isinstance(value, Iterable):
        for item in value:
            _flatten_strings(item, out)
    else:
        raise TypeError(f'expected strings, got {type(value).__name__}: {value!r}')
    return out


def to_hypothesis(prediction: Any) -> str:
    """The single translation of one example, as str."""
    leaves = _flatten_strings(prediction, [])
    if len(leaves) != 1 or leaves[0] is None:
        raise ValueError(
            'expected exactly one translation (bytes/str) per example, got '
            f'{len(leaves)} values: {prediction!r}')
    return _to_text(leaves[0], 'prediction')


def to_references(label: Any, ignore_empty_references: bool = False) -> List[str]:
    """All references of ONE example, as a list of str (None entries dropped)."""
    refs = [
        _to_text(v, 'label value')
        for v in _flatten_strings(label, []) if v is not None
    ]
    if ignore_empty_references:
        refs = [r for r in refs if r.strip()]
    if not refs:
        raise ValueError(
            'example has no reference translation (label is empty or missing; '
            'set ModelSpec.label_key to the references feature, e.g. "french"): '
            f'label={label!r}')
    return refs


# --------------------------------------------------------------------------
# sacreBLEU sufficient statistics
# --------------------------------------------------------------------------

def _make_sacrebleu_metric(kind: str, options: Dict[str, Any]):
    if kind == 'bleu':
        options = dict(options)
        # Named as in sacrebleu.corpus_bleu; sacrebleu.BLEU calls it effective_order.
        if 'use_effective_order' in options:
            options['effective_order'] = options.pop('use_effective_order')
        return sacrebleu.BLEU(**options)
    if kind == 'chrf':
        return sacrebleu.CHRF(**options)
    raise ValueError(f'unknown metric kind {kind!r}')


class CorpusStatistics:
    """Per-segment sufficient statistics and final scores, via sacreBLEU.

    Statistics are lists of ints (BLEU: [hyp_len, ref_len, correct_1..N,
    total_1..N]; chrF: [hyp, ref, match] per n-gram order) so summing them over
    any partition of the corpus is exact.
    """

    def __init__(self, kind: str, options: Dict[str, Any]):
        self.kind = kind
        self.options = dict(options)
        self._metric = None

    def __getstate__(self):
        return {'kind': self.kind, 'options': self.options, '_metric': None}

    @property
    def metric(self):
        if self._metric is None:
            self._metric = _make_sacrebleu_metric(self.kind, self.options)
        return self._metric

    @property
    def num_stats(self) -> int:
        m = self.metric
        if self.kind == 'bleu':
            return 2 + 2 * m.max_ngram_order
        return 3 * (m.char_order + m.word_order)

    def zeros(self) -> _Stats:
        return [0] * self.num_stats

    def segment(self, hypothesis: str, references: List[str]) -> _Stats:
        """sacreBLEU's statistics for one hypothesis against its references (a copy: the
        caller may sum into it)."""
        key = (self.kind, tuple(sorted(self.options.items())), hypothesis, tuple(references))
        stats = _RECENT_SEGMENTS.get(key)
        if stats is None:
            # One segment; each reference is its own single-line reference stream.
            extracted = self.metric._extract_corpus_statistics(  # pylint: disable=protected-access
                [hypothesis], [[r] for r in references])
            stats = [int(x) for x in extracted[0]]
            if len(_RECENT_SEGMENTS) >= _RECENT_SEGMENTS_KEPT:
                _RECENT_SEGMENTS.clear()
            _RECENT_SEGMENTS[key] = stats
        return list(stats)

    @staticmethod
    def add(total: _Stats, stats: _Stats) -> _Stats:
        if len(total) != len(stats):
            raise ValueError(f'statistics length mismatch: {len(total)} != {len(stats)}')
        for i, v in enumerate(stats):
            total[i] += v
        return total

    def score(self, stats: _Stats) -> float:
        # Copy: BLEU's add-k smoothing mutates the lists it is given.
        # pylint: disable-next=protected-access
        return float(self.metric._compute_score_from_stats(list(stats)).score)


# --------------------------------------------------------------------------
# TFMA combiner and metrics
# --------------------------------------------------------------------------

def _model_spec(eval_config: Optional[config_pb2.EvalConfig],
                model_name: str) -> Optional[config_pb2.ModelSpec]:
    if not eval_config or not eval_config.model_specs:
        return None
    specs = list(eval_config.model_specs)
    if len(specs) == 1:
        return specs[0]
    for spec in specs:
        if spec.name == model_name:
            return spec
    return None


def _select(value: Any, keys: Iterable[str]) -> Any:
    """value[k] for the first k present if value is a dict, else value."""
    if isinstance(value, Mapping):
        for k in keys:
            if k and k in value:
                return value[k]
    return value


class _SegmentStatistics(metric_types.Preprocessor):
    """sacreBLEU's statistics of one example's translation against its references.

    A preprocessor, so TFMA computes them once per example, before it fans the examples out
    to their slices (overall and each length): the combiners of every slice only sum them.
    """

    def __init__(self, key: metric_types.MetricKey, statistics: CorpusStatistics,
                 eval_config: Optional[config_pb2.EvalConfig], model_name: str,
                 output_name: str, prediction_key: Optional[str],
                 ignore_empty_references: bool, max_references: int):
        super().__init__(name=f'_segment_statistics_{key.name}_{model_name}_{output_name}')
        self._key = key
        self._stats = statistics
        self._max_references = max_references or None
        self._model_name = model_name
        self._output_name = output_name
        self._ignore_empty_references = ignore_empty_references
        spec = _model_spec(eval_config, model_name)
        self._prediction_keys = [
            prediction_key, spec.prediction_key if spec else '',
            DEFAULT_PREDICTION_KEY
        ]
        self._label_key = spec.label_key if spec else ''

    def _hypothesis_and_references(self, element) -> tuple[str, List[str]]:
        model_name = self._model_name or None
        output_name = self._output_name or None
        prediction = element.get_predictions(model_name, output_name)
        label = element.get_labels(model_name, output_name)
        prediction = _select(prediction, self._prediction_keys)
        if isinstance(prediction, Mapping) and len(prediction) == 1:
            prediction = next(iter(prediction.values()))
        if isinstance(prediction, Mapping):
            raise ValueError(
                f'{self._key.name}: the prediction is a dict with keys '
                f'{sorted(prediction)}; set prediction_key in the MetricConfig '
                '(or ModelSpec.prediction_key) to the translation output')
        label = _select(label, [self._label_key])
        if prediction is None:
            raise ValueError(f'{self._key.name}: no prediction for this example')
        references = to_references(label, self._ignore_empty_references)
        return to_hypothesis(prediction), references[:self._max_references]

    def process(self, extracts) -> Iterable[_Stats]:
        element = metric_util.to_standard_metric_inputs(extracts)
        yield self._stats.segment(*self._hypothesis_and_references(element))


class _CorpusStatsCombiner(beam.CombineFn):
    """Sums the examples' statistics (from _SegmentStatistics); scores only in
    extract_output."""

    def __init__(self, key: metric_types.MetricKey, statistics: CorpusStatistics):
        self._key = key
        self._stats = statistics

    def create_accumulator(self) -> _Stats:
        return self._stats.zeros()

    def add_input(self, accumulator: _Stats, stats: _Stats) -> _Stats:
        return CorpusStatistics.add(accumulator, stats)

    def merge_accumulators(self, accumulators: Iterable[_Stats]) -> _Stats:
        result = None
        for accumulator in accumulators:
            if result is None:
                result = list(accumulator)
            else:
                CorpusStatistics.add(result, accumulator)
        return result if result is not None else self.create_accumulator()

    def extract_output(self, accumulator: _Stats) -> Dict[metric_types.MetricKey, float]:
        return {self._key: self._stats.score(accumulator)}


def _make_computations_fn(kind: str, option_names: tuple[str, ...]) -> Callable:
    """create_computations_fn for one model/output (wrapped per key by TFMA)."""

    def computations(name: str,
                     prediction_key: Optional[str] = None,
                     ignore_empty_references: bool = False,
                     max_references: int = 0,
                     eval_config: Optional[config_pb2.EvalConfig] = None,
                     model_name: str = '',
                     output_name: str = '',
                     sub_key: Optional[metric_types.SubKey] = None,
                     **options) -> metric_types.MetricComputations:
        unknown = set(options) - set(option_names)
        if unknown:
            raise TypeError(f'unknown {kind} options: {sorted(unknown)}')
        key = metric_types.MetricKey(
            name=name, model_name=model_name, output_name=output_name,
            sub_key=sub_key)
        statistics = CorpusStatistics(kind, options)
        return [
            metric_types.MetricComputation(
                keys=[key],
                preprocessors=[_SegmentStatistics(
                    key, statistics, eval_config=eval_config, model_name=model_name,
                    output_name=output_name, prediction_key=prediction_key,
                    ignore_empty_references=ignore_empty_references,
                    max_references=max_references)],
                combiner=_CorpusStatsCombiner(key, statistics))
        ]

    # merge_per_key_computations inspects the *named* args to decide what to
    # pass (eval_config, model_name, output_name, sub_key).
    return metric_util.merge_per_key_computations(computations)


class CorpusBleu(metric_types.Metric):
    """Corpus BLEU (sacreBLEU, 13a tokenisation by default) as a float in [0, 100].

    Same defaults as ``sacrebleu.corpus_bleu``. ``prediction_key`` selects the
    translation when the model outputs a dict (see module docstring);
    ``max_references`` > 0 scores against that many references per sentence.
    """

    def __init__(self,
                 name: str = CORPUS_BLEU_NAME,
                 prediction_key: Optional[str] = None,
                 ignore_empty_references: bool = False,
                 max_references: int = 0,
                 lowercase: bool = False,
                 tokenize: str = sacrebleu.BLEU.TOKENIZER_DEFAULT,
                 smooth_method: str = 'exp',
                 smooth_value: Optional[float] = None,
                 use_effective_order: bool = False):
        super().__init__(
            _make_computations_fn('bleu', ('lowercase', 'tokenize', 'smooth_method',
                                           'smooth_value', 'use_effective_order')),
            name=name,
            prediction_key=prediction_key,
            ignore_empty_references=ignore_empty_references,
            max_references=max_references,
            lowercase=lowercase,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            use_effective_order=use_effective_order)

    def _default_name(self) -> str:
        return CORPUS_BLEU_NAME


class CorpusChrf(metric_types.Metric):
    """Corpus chrF (sacreBLEU; chrF++ with word_order=2) as a float in [0, 100].

    Same defaults as ``sacrebleu.corpus_chrf`` (whitespace excluded).
    """

    def __init__(self,
                 name: str = CORPUS_CHRF_NAME,
                 prediction_key: Optional[str] = None,
                 ignore_empty_references: bool = False,
                 max_references: int = 0,
                 char_order: int = sacrebleu.CHRF.CHAR_ORDER,
                 word_order: int = sacrebleu.CHRF.WORD_ORDER,
                 beta: int = sacrebleu.CHRF.BETA,
                 lowercase: bool = False,
                 whitespace: bool = False,
                 eps_smoothing: bool = False):
        super().__init__(
            _make_computations_fn('chrf', ('char_order', 'word_order', 'beta',
                                           'lowercase', 'whitespace',
                                           'eps_smoothing')),
            name=name,
            prediction_key=prediction_key,
            ignore_empty_references=ignore_empty_references,
            max_references=max_references,
            char_order=char_order,
            word_order=word_order,
            beta=beta,
            lowercase=lowercase,
            whitespace=whitespace,
            eps_smoothing=eps_smoothing)

    def _default_name(self) -> str:
        return CORPUS_CHRF_NAME


metric_types.register_metric(CorpusBleu)
metric_types.register_metric(CorpusChrf)
