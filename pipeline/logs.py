"""Console logging that tells a user what the pipeline is doing, without library noise.

TFX, Beam and TF log hundreds of INFO lines per component (protos, deployment configs).
By default we show our own INFO lines, TFX's component start/finish/cache lines, and every
warning; `--verbose` shows everything.
"""
from __future__ import annotations

import logging
import re

_OUR_PACKAGES = ("pipeline", "components", "trainer_module")
_TFX_PROGRESS = re.compile(r"^(Component .* is (running|finished)|A cached execution)")


class _ProgressFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.name.split(".")[0] in _OUR_PACKAGES:
            return True
        return bool(_TFX_PROGRESS.match(str(record.msg)))


def configure(verbose: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    if not verbose:
        handler.addFilter(_ProgressFilter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    # TFX reports progress through absl's logger, whose level tf.saved_model.save (run by
    # Transform and Trainer) raises to WARNING as a side effect: pin it at INFO.
    absl_logger = logging.getLogger("absl")
    absl_logger.setLevel(logging.INFO)
    absl_logger.setLevel = lambda level: None
    # TensorFlow's logger prints through a handler of its own: route it through ours.
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.handlers.clear()
    tf_logger.propagate = True
