"""The command of the compiled pipeline's task containers: TFX's container entry point
(`kubeflow_v2_run_executor`, its flags unchanged) in a process that, like `nmt`, keeps its
imports out of the garbage collector's passes and ends without freeing every object first
(runners/interpreter.py), and builds no package of TFX for Beam's workers, which run the
image (`local_runner.without_tfx_package`).

    python -m runners.kubeflow_task --executor_class_path=... (TFX's flags)
"""
from __future__ import annotations

import argparse
from typing import NoReturn

from absl import app
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor as tfx_task

from runners import interpreter, local_runner


def main(parsed_argv: tuple[argparse.Namespace, list[str]]) -> NoReturn:
    """TFX's task, then the process ends (an exception ends it the usual way, via absl)."""
    interpreter.freeze_imports()
    # Every Beam worker of the compiled pipeline runs the image, which has TFX: in this pod,
    # in a Flink worker pool, or on Dataflow (kubeflow_runner.with_sdk_container_image).
    local_runner.without_tfx_package(every_runner=True)
    tfx_task.main(parsed_argv)
    interpreter.exit_now(0)


if __name__ == "__main__":
    # TFX's own parser: the spec's arguments are TFX's, and Beam's flags pass through it.
    app.run(main, flags_parser=tfx_task._parse_flags)  # pylint: disable=protected-access
