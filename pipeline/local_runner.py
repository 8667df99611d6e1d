"""Runs the pipeline on this machine: LocalDagRunner, ML Metadata in SQLite."""
from __future__ import annotations

import logging
import os

from tfx import v1 as tfx
from tfx.orchestration import pipeline as tfx_pipeline

from pipeline.config import PipelineConfig, pipeline_arguments
from pipeline.pipeline import create_pipeline

_LOG = logging.getLogger(__name__)


def build(config: PipelineConfig) -> tfx.dsl.Pipeline:
    return create_pipeline(
        **pipeline_arguments(config),
        metadata_connection_config=tfx.orchestration.metadata
        .sqlite_metadata_connection_config(config.metadata_path))


def run(config: PipelineConfig, to_component: str | None = None) -> None:
    """Runs the components in order (up to `to_component` if given); unchanged ones are cached."""
    os.makedirs(config.pipeline_root, exist_ok=True)
    _LOG.info("Running pipeline %s on %s (pipeline root %s, metadata %s)%s.",
              config.pipeline_name, config.data_path, config.pipeline_root,
              config.metadata_path, f", up to {to_component}" if to_component else "")
    run_options = None
    if to_component:
        run_options = tfx_pipeline.RunOptions(to_nodes=[to_component])
    tfx.orchestration.LocalDagRunner().run(build(config), run_options=run_options)
