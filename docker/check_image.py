"""Build step of the Dockerfile: can this image run every task the compiled pipeline names?

Imports each executor class and module path that `nmt kubeflow compile` writes into a spec
(tests/test_kubeflow_image.py keeps this list equal to what the specs name), plus
tensorflow_text, whose ops the Transform graph and the exported model need, and checks that the
schema path compiled into the spec is the packaged schema. Exits non-zero, naming what is
missing, so a broken image fails `docker build` instead of a run on the cluster.
"""
from __future__ import annotations

import filecmp
import importlib
import sys

# --executor_class_path values of the kfp, vertex and vertex --trainer-workers specs.
EXECUTOR_CLASSES = (
    "components.atomic_pusher.Executor",
    "components.evaluator_executor.Executor",
    "components.fra_example_gen.executor.Executor",
    "components.strict_example_validator.Executor",
    "tfx.components.schema_gen.import_schema_gen.executor.Executor",
    "tfx.components.statistics_gen.executor.Executor",
    "tfx.components.trainer.executor.GenericExecutor",
    "tfx.components.transform.executor.Executor",
    "tfx.extensions.google_cloud_ai_platform.trainer.executor.GenericExecutor",
)
# Entry points the executors import by name at run time, and what they load with them.
MODULES = (
    "tensorflow_text",
    "trainer_module.task",  # run_fn
    "transform_module.preprocessing",  # preprocessing_fn
    "sentencepiece",  # its SentencePiece learner, imported when that tokenizer runs
    "components.tfma_metrics",  # the Evaluator's metrics: BLEU, chrF
    "components.token_metrics",  # and token accuracy, perplexity
    "runners.kubeflow_task",  # every task container's command (kubeflow_runner.TASK_COMMAND)
    "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",
    "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver",
)


def main(image_schema_file: str | None = None) -> int:
    """`image_schema_file`: where the spec expects the schema (default: the compiled path)."""
    problems = []
    for path in EXECUTOR_CLASSES:
        module, _, name = path.rpartition(".")
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as err:
            problems.append(f"executor {path}: {err}")
    for module in MODULES:
        try:
            importlib.import_module(module)
        except ImportError as err:
            problems.append(f"module {module}: {err}")
    from runners.kubeflow_runner import IMAGE_SCHEMA_FILE
    from schemas import SCHEMA_FILE

    image_schema_file = image_schema_file or IMAGE_SCHEMA_FILE
    try:
        if not filecmp.cmp(image_schema_file, SCHEMA_FILE, shallow=False):
            problems.append(f"{image_schema_file} differs from the packaged {SCHEMA_FILE}")
    except OSError as err:
        problems.append(f"schema: {err}")
    for problem in problems:
        print(f"check_image: {problem}", file=sys.stderr)
    print("check_image: " + ("FAILED" if problems else
                             f"OK, {len(EXECUTOR_CLASSES)} executors and {len(MODULES)} modules"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
