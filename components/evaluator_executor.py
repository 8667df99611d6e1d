"""TFX's Evaluator executor, its model's graphs run as exported: without Grappler, as `nmt
translate` and `nmt evaluate` run them (`components.graph_optimization`).

So the Evaluator scores the very graphs `nmt` serves with (Grappler's rewrites may round
differently), and skips Grappler's pass over the evaluation signature (the greedy loop and the
teacher-forced scores in one graph) at its first call; what that bought is within the
machine's noise (docs/benchmarks-history.md, "The Evaluator without Grappler"). The setting is
TensorFlow's and holds for the whole process, so it is set back when the Evaluator ends: under
LocalDagRunner the Trainer and the next runs' components share the process. It reaches the
model where Beam runs it in this process (the DirectRunner in memory, as `nmt run` runs it);
Beam workers in processes of their own keep TensorFlow's defaults.
"""
from __future__ import annotations

from typing import Any

from tfx.components.evaluator import executor as evaluator_executor

from components.graph_optimization import skip_graph_optimization


class Executor(evaluator_executor.Executor):
    """TFX's Evaluator with Grappler off while it runs."""

    def Do(self, input_dict: dict[str, list[Any]],  # noqa: N802 (TFX's name)
           output_dict: dict[str, list[Any]], exec_properties: dict[str, Any]) -> None:
        skipped_before = skip_graph_optimization()
        try:
            super().Do(input_dict, output_dict, exec_properties)
        finally:
            skip_graph_optimization(skipped_before)
