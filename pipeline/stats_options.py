"""What StatisticsGen computes: TFDV's statistics, with top-k from a sketch."""
from __future__ import annotations

import tensorflow_data_validation as tfdv


def make_stats_options() -> tfdv.StatsOptions:
    """TFDV's defaults, except that the most frequent values (top-k and the rank histogram)
    come from a bounded sketch (Misra-Gries) instead of an exact count of every distinct
    value: the features are free text, so an exact count holds every distinct sentence of the
    corpus (docs/scaling.md). Nothing gates on those counts; the schema limits only presence
    and the number of references."""
    return tfdv.StatsOptions(use_sketch_based_topk_uniques=True)
