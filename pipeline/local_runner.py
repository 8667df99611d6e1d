"""Runs the pipeline on this machine: LocalDagRunner, ML Metadata in SQLite.

One run at a time per pipeline root (run_lock). A run that fails because the disk is full
says so in one sentence; TFX has already removed the failed component's output. After a
complete run whose candidate was not blessed, the log says which thresholds it missed.
"""
from __future__ import annotations

import errno
import logging
import os

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from tfx.utils import dependency_utils

from pipeline.config import PipelineConfig, pipeline_arguments
from pipeline.pipeline import create_pipeline
from pipeline.run_lock import RunError, pipeline_root_lock

_LOG = logging.getLogger(__name__)
_OUT_OF_SPACE = {errno.ENOSPC: "no space left on device",
                 errno.EFBIG: "file too large for the file-size limit",
                 errno.EDQUOT: "disk quota exceeded"}


def build(config: PipelineConfig) -> tfx_pipeline.Pipeline:
    return create_pipeline(
        **pipeline_arguments(config),
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            config.metadata_path))


def out_of_space(err: BaseException) -> str | None:
    """Why `err` (or an error it wraps: Beam and TF re-raise with the OS message in the text)
    is a full disk or an exceeded file-size limit or quota, else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _OUT_OF_SPACE:
            return _OUT_OF_SPACE[err.errno]
        for code, reason in _OUT_OF_SPACE.items():
            if os.strerror(code) in str(err):
                return reason
        err = err.__cause__ or err.__context__
    return None


def runs_in_process(beam_pipeline_args: tuple[str, ...]) -> bool:
    """True for Beam's DirectRunner (the default), which runs on this machine."""
    runner = PipelineOptions(flags=list(beam_pipeline_args)).view_as(StandardOptions).runner
    return runner in (None, "DirectRunner", "direct")


class _CurrentComponent(logging.Handler):
    """Remembers which component LocalDagRunner started last (it logs through absl)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.component = "the pipeline"

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Component %s is running." and record.args:
            self.component = str(record.args[0])


def run(config: PipelineConfig, to_component: str | None = None) -> None:
    """Runs the components in order (up to `to_component` if given); unchanged ones are cached."""
    with pipeline_root_lock(config.pipeline_root):
        _LOG.info("Running pipeline %s on %s (pipeline root %s, metadata %s)%s.",
                  config.pipeline_name, config.data_path, config.pipeline_root,
                  config.metadata_path, f", up to {to_component}" if to_component else "")
        run_options = None
        if to_component:
            run_options = tfx_pipeline.RunOptions(to_nodes=[to_component])
        if runs_in_process(config.beam_pipeline_args):
            # TFX builds an sdist of itself before every Beam component (5-10 s each, writing a
            # copy of its sources to /tmp) so that remote workers can import it; the
            # DirectRunner runs here, where TFX is installed.
            dependency_utils.make_beam_dependency_flags = list
        current = _CurrentComponent()
        logging.getLogger("absl").addHandler(current)
        try:
            LocalDagRunner().run(build(config), run_options=run_options)
        except Exception as err:  # only a full disk is rephrased; anything else is a bug
            reason = out_of_space(err)
            if not reason:
                raise
            raise RunError(f"{current.component} could not write its output ({reason}); nothing "
                           "was published: free some space and run the same command again "
                           "(finished components are reused).") from err
        finally:
            logging.getLogger("absl").removeHandler(current)
        if to_component in (None, "Evaluator", "AtomicPusher"):
            log_evaluator_verdict(config.metadata_path)


def log_evaluator_verdict(metadata_path: str) -> None:
    """Says why the Evaluator did not bless the latest candidate: the failed thresholds."""
    import ml_metadata as mlmd  # only after a complete run
    import tensorflow_model_analysis as tfma
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path
    store = mlmd.MetadataStore(connection)
    blessings = store.get_artifacts_by_type("ModelBlessing")
    if not blessings:
        return
    blessing = max(blessings, key=lambda a: a.id)
    if blessing.custom_properties["blessed"].int_value:
        return
    # The Evaluator's execution wrote both (a cached one re-publishes them later; the Pusher
    # reads the blessing): the first execution with the blessing as output.
    execution_id = min(e.execution_id for e in store.get_events_by_artifact_ids([blessing.id])
                       if e.type == metadata_store_pb2.Event.OUTPUT)
    evaluation = next(a for a in store.get_artifacts_by_id(
        [e.artifact_id for e in store.get_events_by_execution_ids([execution_id])])
        if a.type == "ModelEvaluation")
    _LOG.warning("The Evaluator did not bless the candidate model: %s.",
                 "; ".join(describe_failures(tfma.load_validation_result(evaluation.uri))))


def describe_failures(result) -> list[str]:
    """One phrase per failed threshold of a TFMA ValidationResult."""
    phrases = []
    for per_slice in result.metric_validations_per_slice:
        for failure in per_slice.failures:
            key = failure.metric_key
            value = failure.metric_value.double_value.value
            what = (f"{key.name} changed by {value:+.3f} against the baseline"
                    if key.is_diff else f"{key.name} is {value:.3f}")
            phrases.append(f"{what} ({failure.message.strip() or 'threshold not met'})")
    return phrases or ["no threshold failed (see the validation result)"]
