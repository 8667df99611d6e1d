"""TensorFlow's graph optimizer (Grappler), on or off for the graphs this process runs next:
`nmt translate`, `nmt evaluate` and the Evaluator run the exported signatures without it."""
from __future__ import annotations


def skip_graph_optimization(skip: bool = True) -> bool:
    """Sets this process's TensorFlow to run the signatures' graphs as exported, without
    Grappler's graph optimizations (or, with `skip=False`, with them again, TensorFlow's
    default), for the graphs that run after it. Grappler took most of a signature's first
    call here, to no gain: decoding the dev set with and without it gave the same
    translations, no slower without (docs/benchmarks-history.md, "Grappler off in `nmt`'s own
    serving"). TF Serving keeps it (its warm-up requests pay the first call there). Returns
    whether it was skipped before, so that a caller can set it back.
    """
    import tensorflow as tf

    before = bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer"))
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": skip})
    return before
