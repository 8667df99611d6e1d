"""Runs the pipeline on this machine: LocalDagRunner, ML Metadata in SQLite.

One run at a time per pipeline root (run_lock). A run that fails because the disk is full
says so in one sentence; TFX has already removed the failed component's output. A run that
completes ends with a summary (pipeline/run_summary.py): times per component, BLEU and chrF,
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

from pipeline import run_summary
from pipeline.config import PipelineConfig, pipeline_arguments
from pipeline.pipeline import create_pipeline
from pipeline.run_lock import RunError

_LOG = logging.getLogger(__name__)
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


class _CurrentComponent(logging.Handler):
    """Remembers which component LocalDagRunner started last (it logs through absl)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.component = "the pipeline"

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg == "Component %s is running." and record.args:
            self.component = str(record.args[0])


def run(config: PipelineConfig, to_component: str | None = None) -> None:
    """Runs the components in order (up to `to_component` if given); unchanged ones are cached.
    Logs the run's summary at the end. The caller holds the pipeline root's lock (run_lock)."""
    started = time.monotonic()
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
    # TFX's Beam executors parse sys.argv with absl's flags (base_beam_executor.py), which
    # would read nmt's -v as absl's --verbosity and fail: they get the program name only.
    argv, sys.argv = sys.argv, sys.argv[:1]
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
        sys.argv = argv
        logging.getLogger("absl").removeHandler(current)
    stopped_at = None if to_component == _LAST_COMPONENT else to_component
    facts = run_summary.collect(config, time.monotonic() - started, stopped_at)
    # A warning when the candidate was rejected: the run did not deliver a new model.
    rejected = facts.verdict is not None and not facts.verdict.blessed
    _LOG.log(logging.WARNING if rejected else logging.INFO,
             "\n".join(run_summary.summary_lines(facts)))
