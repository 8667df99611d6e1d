"""Runs the pipeline on this machine: LocalDagRunner, ML Metadata in SQLite.

One run at a time per pipeline root (run_lock). A run that fails because the disk is full
says so in one sentence; TFX has already removed the failed component's output. A run that
completes ends with a summary (runners/run_summary.py): times per component, BLEU and chrF,
the blessing (which thresholds a rejected model missed), the pushed version, what to do next.
"""
from __future__ import annotations

import errno
import logging
import os
import sys
import time

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from tfx.orchestration import metadata
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from tfx.utils import dependency_utils

from engines import flink_jobs
from metadata.layouts import RUN_CONTEXT
from metadata.runs import record_engine
from metadata.store import connect
from runners import interpreter, run_summary
from pipeline.config import PipelineConfig, pipeline_arguments
from engines.flink import FlinkEngine
from pipeline.pipeline import create_pipeline
from runners.run_lock import RunError

_LOG = logging.getLogger(__name__)
_TFX_PACKAGE = dependency_utils.make_beam_dependency_flags
_LAST_COMPONENT = "AtomicPusher"  # --to this one is a complete run
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


def without_tfx_package(every_runner: bool = False) -> None:
    """From now on in this process, TFX's Beam executors build no package of TFX where Beam's
    workers have it: on the DirectRunner (or, with every_runner, on any runner).

    Before every Beam component, TFX builds an sdist of itself so that remote workers can
    install it (`make_beam_dependency_flags`): about a second, and a copy of its sources, some
    50 MB, in a /tmp directory it never removes. The DirectRunner runs here, where TFX is
    installed; so do Flink's SDK workers, and on a cluster they run the project's image. Other
    runners (Dataflow without the image) still get TFX's package."""
    def flags(beam_pipeline_args: list[str]) -> list[str]:
        if every_runner or runs_in_process(tuple(beam_pipeline_args)):
            return list(beam_pipeline_args)
        return _TFX_PACKAGE(beam_pipeline_args)

    dependency_utils.make_beam_dependency_flags = flags


def direct_engine(beam_pipeline_args: tuple[str, ...]) -> str:
    """How a run on Beam's DirectRunner executes, in the words `nmt metadata runs` shows."""
    options = PipelineOptions(flags=list(beam_pipeline_args)).get_all_options()
    mode, workers = options.get("direct_running_mode"), options.get("direct_num_workers")
    if mode in (None, "in_memory") and workers in (None, 1):
        return "direct (in memory)"
    return f"direct ({mode or 'in_memory'}, {workers or 'all cores as'} workers)"


def beam_components(pipeline: tfx_pipeline.Pipeline) -> list:
    from tfx.dsl.components.base.base_beam_component import BaseBeamComponent

    return [c for c in pipeline.components if isinstance(c, BaseBeamComponent)]


def name_flink_jobs(pipeline: tfx_pipeline.Pipeline) -> None:
    """Each Beam component's Flink job is named after it (the log and the summary show it)."""
    for component in beam_components(pipeline):
        component.with_beam_pipeline_args([f"--job_name=nmt-{component.id}"])


def _first_line(err: BaseException) -> str:
    """The error's own first line, without the traceback text Beam folds into messages."""
    text = str(err).strip().splitlines()
    return text[0][:300] if text else type(err).__name__


class _CurrentComponent(logging.Handler):
    """Remembers which component LocalDagRunner started last (it logs through absl)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.component = "the pipeline"

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Component %s is running." and record.args:
            self.component = str(record.args[0])


def _record_engine(config: PipelineConfig, engine: str, started_at: float) -> None:
    """On this run's context, if the run got as far as creating one (the newest, created
    after `started_at`, a time.time()). A failure here only warns: it must not hide the
    run's own error, such as a full disk."""
    if not os.path.exists(config.metadata_path):
        return
    try:
        store = connect(metadata.sqlite_metadata_connection_config(
            config.metadata_path))  # read-write, as the run's own
        newest = store.get_contexts_by_type(RUN_CONTEXT)
        run = max(newest, key=lambda c: c.create_time_since_epoch, default=None)
        if run is not None and run.create_time_since_epoch >= started_at * 1000 - 1000:
            record_engine(store, run.name, engine)
    except Exception as err:  # noqa: BLE001  see the docstring
        _LOG.warning("Could not record the Beam engine in ML Metadata: %s", err)


def run(config: PipelineConfig, to_component: str | None = None,
        flink_engine: FlinkEngine | None = None) -> None:
    """Runs the components in order (up to `to_component` if given); unchanged ones are cached.
    Logs the run's summary at the end. The caller holds the pipeline root's lock (run_lock)
    and, for Flink, has started `flink_engine`, whose Beam flags `config` carries."""
    started, started_at = time.monotonic(), time.time()
    engine = flink_engine.description if flink_engine else direct_engine(
        config.beam_pipeline_args)
    _LOG.info("Running pipeline %s on %s (pipeline root %s, metadata %s, Beam engine %s)%s.",
              config.pipeline_name, config.data_path, config.pipeline_root,
              config.metadata_path, engine, f", up to {to_component}" if to_component else "")
    run_options = None
    if to_component:
        run_options = tfx_pipeline.RunOptions(to_nodes=[to_component])
    without_tfx_package(every_runner=flink_engine is not None)
    pipeline = build(config)
    on_flink = set()
    if flink_engine:
        name_flink_jobs(pipeline)
        on_flink = {component.id for component in beam_components(pipeline)}
    current = _CurrentComponent()
    logging.getLogger("absl").addHandler(current)
    # TFX's Beam executors parse sys.argv with absl's flags (base_beam_executor.py), which
    # would read nmt's -v as absl's --verbosity and fail: they get the program name only.
    argv, sys.argv = sys.argv, sys.argv[:1]
    interpreter.freeze_imports()  # the components' modules and TensorFlow are loaded by now
    try:
        LocalDagRunner().run(pipeline, run_options=run_options)
    except Exception as err:  # a full disk and a failed Flink job are rephrased, not bugs
        reason = out_of_space(err)
        if reason:
            raise RunError(f"{current.component} could not write its output ({reason}); "
                           "nothing was published: free some space and run the same command "
                           "again (finished components are reused).") from err
        if current.component in on_flink:
            why = (flink_engine.lost or flink_jobs.failure_reason(flink_engine, err)
                   or _first_line(err))
            raise RunError(f"{current.component} failed on Flink ({why}); nothing "
                           "was published. The job server's log: "
                           f"{flink_engine.log_path}. Run the same command again: finished "
                           "components are reused.") from err
        raise
    finally:
        sys.argv = argv
        logging.getLogger("absl").removeHandler(current)
        _record_engine(config, engine, started_at)
    stopped_at = None if to_component == _LAST_COMPONENT else to_component
    facts = run_summary.collect(config, time.monotonic() - started, stopped_at,
                                engine=engine, flink_jobs=(
                                    flink_jobs.jobs(flink_engine, started_at)
                                    if flink_engine else ()))
    # A warning when the candidate was rejected: the run did not deliver a new model.
    rejected = facts.verdict is not None and not facts.verdict.blessed
    _LOG.log(logging.WARNING if rejected else logging.INFO,
             "\n".join(run_summary.summary_lines(facts)))
