"""Token accuracy and perplexity as TFMA metrics, from the model's teacher-forced sums.

The served model's evaluation signature outputs, per example, the summed negative
log-likelihood of every reference's tokens (with [end]), how many of them the model predicts,
and how many there are. The combiner sums them, so both ratios are exact at corpus level on any
number of Beam workers. Usage in an EvalConfig::

    tfma.MetricConfig(class_name='Perplexity', module='components.token_metrics')
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Callable, Dict, Iterable, List, Optional

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util

TOKEN_ACCURACY_NAME = 'token_accuracy'
PERPLEXITY_NAME = 'perplexity'
_TOKEN_SUM_KEYS = ('token_nll', 'token_correct', 'token_count')


class _TokenSumsCombiner(beam.CombineFn):
    """Sums the per-example outputs token_nll / token_correct / token_count (computed by
    the model on every reference), so the ratio is exact at corpus level on any number of
    workers: accuracy = correct / count, perplexity = exp(nll / count).

    A model without those outputs (a baseline exported before they existed) scores NaN, with a
    warning, instead of failing the evaluation: the blessing gates on BLEU and chrF."""

    def __init__(self, key: metric_types.MetricKey, kind: str, model_name: str,
                 output_name: str):
        self._key = key
        self._kind = kind
        self._model_name = model_name or None
        self._output_name = output_name or None

    def create_accumulator(self) -> List[float]:
        return [0.0, 0.0, 0.0, 0.0]  # the sums, then examples without them

    def add_input(self, accumulator: List[float], element) -> List[float]:
        predictions = element.get_predictions(self._model_name, self._output_name)
        if not isinstance(predictions, Mapping) or not set(_TOKEN_SUM_KEYS) <= set(predictions):
            accumulator[3] += 1
            return accumulator
        for i, name in enumerate(_TOKEN_SUM_KEYS):
            accumulator[i] += float(np.sum(predictions[name]))
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[List[float]]) -> List[float]:
        return [sum(values) for values in zip(*accumulators)] or self.create_accumulator()

    def extract_output(self, accumulator: List[float]) -> Dict[metric_types.MetricKey, float]:
        nll, correct, count, without = accumulator
        if without:
            logging.warning('%s of model %r is NaN: %d examples lack the model outputs %s '
                            '(a model exported before they existed?).', self._key.name,
                            self._model_name or '', int(without), ', '.join(_TOKEN_SUM_KEYS))
            return {self._key: float('nan')}
        if self._kind == TOKEN_ACCURACY_NAME:
            value = correct / count if count else float('nan')
        else:
            value = float(np.exp(nll / count)) if count else float('nan')
        return {self._key: value}


def _token_computations_fn(kind: str) -> Callable:
    """create_computations_fn of a token metric (wrapped per model/output by TFMA)."""

    def computations(name: str, model_name: str = '', output_name: str = '',
                     sub_key: Optional[metric_types.SubKey] = None
                     ) -> metric_types.MetricComputations:
        key = metric_types.MetricKey(name=name, model_name=model_name,
                                     output_name=output_name, sub_key=sub_key)
        return [metric_types.MetricComputation(
            keys=[key], preprocessors=None,
            combiner=_TokenSumsCombiner(key, kind, model_name, output_name))]

    return metric_util.merge_per_key_computations(computations)


class TokenAccuracy(metric_types.Metric):
    """Fraction of reference tokens (with [end]) the model predicts under teacher forcing."""

    def __init__(self, name: str = TOKEN_ACCURACY_NAME):
        super().__init__(_token_computations_fn(TOKEN_ACCURACY_NAME), name=name)


class Perplexity(metric_types.Metric):
    """exp(mean -log p) over all reference tokens (with [end]), teacher-forced."""

    def __init__(self, name: str = PERPLEXITY_NAME):
        super().__init__(_token_computations_fn(PERPLEXITY_NAME), name=name)


metric_types.register_metric(TokenAccuracy)
metric_types.register_metric(Perplexity)
