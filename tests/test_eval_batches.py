"""The Evaluator's input merged into large batches before its model calls
(components/eval_batches.py), on Beam's DirectRunner."""
from __future__ import annotations

import apache_beam as beam
import pyarrow as pa
import pytest
import tensorflow_model_analysis as tfma
from apache_beam.testing.util import assert_that

from components import eval_batches
from pipeline.eval_config import make_eval_config

ARROW = eval_batches.constants.ARROW_RECORD_BATCH_KEY


def _small_batches(rows: int, size: int) -> list[dict]:
    """Extracts as TFMA's reader makes them: `rows` sentences s0, s1, ... `size` a batch."""
    return [{ARROW: pa.RecordBatch.from_pydict(
        {"english": [f"s{i}" for i in range(start, min(start + size, rows))]})}
        for start in range(0, rows, size)]


def test_small_input_batches_reach_the_model_as_batches_of_eval_batch_rows():
    rows = 2 * eval_batches.EVAL_BATCH + 100

    def check(merged: list[dict]) -> None:
        sizes = sorted((extract[ARROW].num_rows for extract in merged), reverse=True)
        assert sum(sizes) == rows
        assert sizes[0] >= eval_batches.EVAL_BATCH - 50, sizes  # not TFX's ~50 rows a call
        assert len(sizes) <= 3, sizes
        seen = [s for extract in merged for s in extract[ARROW].column("english").to_pylist()]
        assert sorted(seen) == sorted(f"s{i}" for i in range(rows))  # each row once

    with beam.Pipeline() as p:
        merged = (p | beam.Create(_small_batches(rows, 50), reshuffle=False)
                  | eval_batches.merge_input_batches().ptransform)
        assert_that(merged, check)


def test_merging_keeps_the_rows_order_and_refuses_extracts_it_does_not_know():
    merged = eval_batches.merge_record_batches(_small_batches(120, 50))
    assert merged[ARROW].column("english").to_pylist() == [f"s{i}" for i in range(120)]
    with pytest.raises(ValueError, match="input batches only"):
        eval_batches.merge_record_batches([{ARROW: _small_batches(1, 1)[0][ARROW],
                                            "features": {}}])


def test_the_evaluator_runs_tfmas_default_extractors_after_the_merge():
    config = tfma.EvalConfig(model_specs=make_eval_config(0.0, 1.0).model_specs)
    extractors = eval_batches.custom_extractors(None, config, None)
    assert extractors[0].stage_name == "MergeInputBatches"
    assert [e.stage_name for e in extractors[1:]] == [
        e.stage_name for e in tfma.default_extractors(eval_config=config)]


def test_tfma_takes_the_model_type_from_the_config_instead_of_loading_the_model_to_guess(
        tmp_path):
    """Without a model_type, TFMA loads the model with Keras once more, only to see whether it
    is Keras (seconds of every Evaluator run): given a Keras model, it would say Keras."""
    import tf_keras
    from tensorflow_model_analysis.utils import model_util

    keras_model = str(tmp_path / "keras")
    tf_keras.Sequential([tf_keras.Input((1,)), tf_keras.layers.Dense(1)]).save(keras_model)
    assert model_util.get_model_type(None, keras_model) == tfma.TF_KERAS  # it does load it
    spec = make_eval_config(0.0, 1.0).model_specs[0]
    assert model_util.get_model_type(spec, keras_model) == tfma.TF_GENERIC
