"""Connecting to an ML Metadata store: the local SQLite file of `nmt run`, a MySQL database or an
MLMD gRPC server (as Kubeflow deploys them), and the one error every query raises when the store
cannot answer (MetadataError: the message says what to do).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import ml_metadata as mlmd
from ml_metadata.proto import metadata_store_pb2

StoreConfig = metadata_store_pb2.ConnectionConfig | metadata_store_pb2.MetadataStoreClientConfig


class MetadataError(Exception):
    """No store, an empty one, or an unknown run/artifact/type: the message says what to do."""


def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    """The local store, read-only: inspecting must never create or migrate one."""
    if not os.path.isfile(path):
        raise MetadataError(f"No ML Metadata store at {path}: run the pipeline first "
                            "(`nmt run`), or pass the --pipeline-root of an existing one.")
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return config


def mysql_config(host: str, port: int, database: str, user: str,
                 password: str) -> metadata_store_pb2.ConnectionConfig:
    """A MySQL-backed store; never creates the database."""
    config = metadata_store_pb2.ConnectionConfig()
    config.mysql.host, config.mysql.port, config.mysql.database = host, port, database
    config.mysql.user, config.mysql.password = user, password
    config.mysql.skip_db_creation = True
    return config


def grpc_config(host: str, port: int,
                timeout_s: float = 30.0) -> metadata_store_pb2.MetadataStoreClientConfig:
    """An MLMD gRPC server, e.g. Kubeflow's metadata-grpc-service:8080."""
    return metadata_store_pb2.MetadataStoreClientConfig(host=host, port=port,
                                                        client_timeout_sec=timeout_s)


@contextlib.contextmanager
def store_errors(*errors: type[Exception]) -> Iterator[None]:
    """MLMD's errors (unreachable server, not a store...) as one clear MetadataError."""
    try:
        yield
    except (mlmd.errors.StatusError, *errors) as err:
        raise MetadataError(f"Cannot read the ML Metadata store ({str(err)[:200]}): check "
                            "--pipeline-root or the connection flags.") from err


def connect(config: StoreConfig) -> mlmd.MetadataStore:
    """An open store, or a MetadataError that says why not."""
    with store_errors(RuntimeError):  # what MLMD raises for a file that is not a store
        return mlmd.MetadataStore(config)
