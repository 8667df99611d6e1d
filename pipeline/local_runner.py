"""Runs the pipeline on this machine: LocalDagRunner, ML Metadata in SQLite."""
from __future__ import annotations

import logging
import os

from tfx import v1 as tfx

from pipeline.config import PipelineConfig
from pipeline.pipeline import create_pipeline

_LOG = logging.getLogger(__name__)


def build(config: PipelineConfig) -> tfx.dsl.Pipeline:
    return create_pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        data_root=config.data_root,
        data_file_pattern=config.data_file_pattern,
        schema_file=config.schema_file,
        split_percentages=config.split_percentages,
        max_line_bytes=config.max_line_bytes,
        beam_pipeline_args=config.beam_pipeline_args,
        enable_cache=config.enable_cache,
        metadata_connection_config=tfx.orchestration.metadata
        .sqlite_metadata_connection_config(config.metadata_path),
    )


def run(config: PipelineConfig) -> None:
    """Runs every component in order; completed components are reused from the cache."""
    os.makedirs(config.pipeline_root, exist_ok=True)
    _LOG.info("Running pipeline %s on %s (pipeline root %s, metadata %s).",
                 config.pipeline_name, config.data_path, config.pipeline_root,
                 config.metadata_path)
    tfx.orchestration.LocalDagRunner().run(build(config))
