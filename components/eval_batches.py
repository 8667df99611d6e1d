"""The Evaluator's model calls on large batches: TFX's Evaluator loads this module
(`Evaluator(module_path=...)`) and takes its `custom_extractors`, TFMA's default extractors
behind one that merges the examples read into batches of EVAL_BATCH rows.

TFX's reader hands TFMA batches whose size Beam tunes to about a second of work, and on a
translation model that stayed near 50 examples. A model call on few sentences decodes them
together until the longest ends; the export sorts a call's sentences by length into
sub-batches (`Translator.decode_by_length`), which only pays when a call holds many
(BENCHMARKS.md, "Decoding speed").
"""
from __future__ import annotations

from typing import Any

import apache_beam as beam
import pyarrow as pa
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis import constants

# Examples per model call: beyond a thousand, a call's sub-batches hold sentences of nearly one
# length already, and a larger call only holds more memory.
EVAL_BATCH = 1024
_ARROW = constants.ARROW_RECORD_BATCH_KEY


def merge_record_batches(extracts: list[dict[str, Any]]) -> dict[str, Any]:
    """Extracts that hold only an Arrow RecordBatch each -> one extract of all their rows, in
    order."""
    for extract in extracts:
        if set(extract) != {_ARROW}:
            raise ValueError(f"eval_batches merges input batches only, got keys {sorted(extract)}")
    table = pa.Table.from_batches([extract[_ARROW] for extract in extracts]).combine_chunks()
    return {_ARROW: table.to_batches()[0] if table.num_rows else extracts[0][_ARROW]}


@beam.ptransform_fn
@beam.typehints.with_input_types(tfma.types.Extracts)
@beam.typehints.with_output_types(tfma.types.Extracts)
def _MergeInputBatches(extracts: beam.PCollection) -> beam.PCollection:  # noqa: N802 (Beam)
    return (extracts
            | "Group" >> beam.BatchElements(
                min_batch_size=EVAL_BATCH, max_batch_size=EVAL_BATCH,
                element_size_fn=lambda extract: extract[_ARROW].num_rows)
            | "Merge" >> beam.Map(merge_record_batches))


def merge_input_batches() -> tfma.extractors.Extractor:
    return tfma.extractors.Extractor(stage_name="MergeInputBatches",
                                     ptransform=_MergeInputBatches())


def custom_extractors(eval_shared_model: Any, eval_config: tfma.EvalConfig,
                      tensor_adapter_config: Any) -> list[tfma.extractors.Extractor]:
    """What TFX's Evaluator runs: TFMA's default extractors, the input merged first."""
    return [merge_input_batches(), *tfma.default_extractors(
        eval_shared_model=eval_shared_model, eval_config=eval_config,
        tensor_adapter_config=tensor_adapter_config)]
