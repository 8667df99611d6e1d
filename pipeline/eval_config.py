"""What the Evaluator measures and when it blesses a model."""
from __future__ import annotations

import json

import tensorflow_model_analysis as tfma
from tfx.components import Evaluator
from tfx.dsl.components.base import executor_spec
from tfx.types import BaseChannel

from components import eval_batches, evaluator_executor
from components.tfma_metrics import CORPUS_BLEU_1REF_NAME, CORPUS_CHRF_1REF_NAME
from trainer_module.export import EXAMPLES_SIGNATURE, TRANSFORM_SIGNATURE, TRANSLATION
from transform_module.preprocessing import FRENCH, LENGTH_BUCKET

METRICS_MODULE = "components.tfma_metrics"
TOKEN_METRICS_MODULE = "components.token_metrics"


def make_eval_config(min_bleu: float, max_drop: float) -> tfma.EvalConfig:
    """Corpus BLEU/chrF (sacreBLEU-exact) against one reference per sentence (the first in
    file order) and against all, token accuracy and perplexity (teacher-forced on all
    references) on the eval split, overall and by English length.

    Blessing: single-reference BLEU >= min_bleu, and neither single-reference BLEU nor chrF
    more than `max_drop` points below the latest blessed model (the first run, with no
    baseline, is judged on BLEU alone). The single-reference figures gate because they are
    the ones published results use: with all references, the frequent short sentences that
    fra.txt translates many ways (up to 32) weigh the most, and a model that memorizes them
    scores more without translating new sentences better (docs/pipeline.md, "Evaluation").
    Only the whole eval split gates: the length slices are reported, but the longest holds a
    few dozen sentences, where one sentence moves BLEU by points.
    """
    not_worse = tfma.GenericChangeThreshold(direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                                            absolute={"value": -max_drop})
    single = {"max_references": 1}
    return tfma.EvalConfig(
        # model_type: without it, TFMA loads the model once more to see whether it is Keras.
        model_specs=[tfma.ModelSpec(model_type=tfma.TF_GENERIC,
                                    signature_name=EXAMPLES_SIGNATURE, label_key=FRENCH,
                                    prediction_key=TRANSLATION,
                                    preprocessing_function_names=[TRANSFORM_SIGNATURE])],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=[LENGTH_BUCKET])],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="CorpusBleu", module=METRICS_MODULE,
                              config=json.dumps({"name": CORPUS_BLEU_1REF_NAME, **single}),
                              per_slice_thresholds=_overall(tfma.MetricThreshold(
                                  value_threshold=tfma.GenericValueThreshold(
                                      lower_bound={"value": min_bleu}),
                                  change_threshold=not_worse))),
            tfma.MetricConfig(class_name="CorpusChrf", module=METRICS_MODULE,
                              config=json.dumps({"name": CORPUS_CHRF_1REF_NAME, **single}),
                              per_slice_thresholds=_overall(
                                  tfma.MetricThreshold(change_threshold=not_worse))),
            tfma.MetricConfig(class_name="CorpusBleu", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="CorpusChrf", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="TokenAccuracy", module=TOKEN_METRICS_MODULE),
            tfma.MetricConfig(class_name="Perplexity", module=TOKEN_METRICS_MODULE),
        ])])


def _overall(threshold: tfma.MetricThreshold) -> list[tfma.PerSliceMetricThreshold]:
    return [tfma.PerSliceMetricThreshold(slicing_specs=[tfma.SlicingSpec()], threshold=threshold)]


def make_evaluator(examples: BaseChannel, model: BaseChannel,
                   baseline_model: BaseChannel | None, min_bleu: float, max_drop: float
                   ) -> Evaluator:
    """TFX's Evaluator as the pipeline runs it (and benchmarks/evaluator_time.py, to time it
    as `make run` runs it): make_eval_config's measures and gate; components/eval_batches.py,
    which merges TFMA's input into large model calls; components/evaluator_executor.py, which
    runs the model's graphs without Grappler."""
    evaluator = Evaluator(examples=examples, model=model, baseline_model=baseline_model,
                          eval_config=make_eval_config(min_bleu, max_drop),
                          module_path=eval_batches.__name__)
    evaluator.executor_spec = executor_spec.BeamExecutorSpec(evaluator_executor.Executor)
    return evaluator
