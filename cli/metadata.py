"""`nmt metadata runs|artifacts|lineage|models|diff`: the ML Metadata store, read for people
(aligned tables) or scripts (--json), without writing MLMD queries.

The store is the local SQLite one of the pipeline root by default; --mysql-* or --grpc-* flags
read a MySQL-backed store or an MLMD gRPC server instead (as Kubeflow deploys it). Runs written
by `nmt run` (TFX's LocalDagRunner) and by Kubeflow Pipelines v2 are both understood: the
layout is told from the store (metadata/layouts.py). TensorFlow and TFMA load only when a command
needs them (metrics), so `runs` stays fast. The store flags are `nmt report`'s too.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any, Callable

from pipeline import config as config_lib
from metadata.artifacts import list_artifacts
from metadata.diff import diff_runs
from metadata.lineage import lineage
from metadata.models import list_models
from metadata.runs import list_runs
from metadata.store import (MetadataError, StoreConfig, connect, grpc_config, mysql_config,
                            sqlite_config)
from metadata.values import as_text
from metadata.signatures import signature

MYSQL_PASSWORD_ENV = "NMT_MYSQL_PASSWORD"
Columns = list[tuple[str, str]]  # (row key, header)
Table = tuple[str, list[dict[str, Any]], Columns]  # (title, rows, columns)


# --- Connection flags, shared by every command and `nmt report` --------------------------

def store_flags() -> argparse.ArgumentParser:
    flags = argparse.ArgumentParser(add_help=False)
    group = flags.add_argument_group(
        "metadata store", "default: the SQLite store <pipeline root>/metadata.sqlite")
    group.add_argument("--pipeline-root", default=None,
                       help="pipeline root (default: $NMT_PIPELINE_ROOT or ./nmt_runs)")
    group.add_argument("--grpc-host", help="read an MLMD gRPC server instead, e.g. "
                                           "metadata-grpc-service.kubeflow (Kubeflow)")
    group.add_argument("--grpc-port", type=int, default=8080)
    group.add_argument("--mysql-host", help="read a MySQL-backed store on this host instead, "
                                            "e.g. Kubeflow's mysql.kubeflow (database metadb)")
    group.add_argument("--mysql-port", type=int, default=3306)
    group.add_argument("--mysql-database", default="metadb")
    group.add_argument("--mysql-user", default="root")
    group.add_argument("--mysql-password", default=os.environ.get(MYSQL_PASSWORD_ENV, ""),
                       help=f"default: ${MYSQL_PASSWORD_ENV}")
    return flags


def pipeline_root(args: argparse.Namespace) -> str:
    return config_lib.PipelineConfig(
        data_path="", **({"pipeline_root": args.pipeline_root} if args.pipeline_root else {})
    ).pipeline_root


def store_config(args: argparse.Namespace) -> StoreConfig:
    """The flags as an MLMD connection: gRPC, MySQL, else the pipeline root's SQLite file."""
    if args.grpc_host and args.mysql_host:
        raise MetadataError("Pass --grpc-host or --mysql-host, not both.")
    if args.grpc_host:
        return grpc_config(args.grpc_host, args.grpc_port)
    if args.mysql_host:
        return mysql_config(args.mysql_host, args.mysql_port, args.mysql_database,
                            args.mysql_user, args.mysql_password)
    return sqlite_config(config_lib.PipelineConfig(
        data_path="", pipeline_root=pipeline_root(args)).metadata_path)


# --- Tables -------------------------------------------------------------------------------

def print_table(rows: list[dict[str, Any]], columns: Columns) -> None:
    """Left-aligned columns under their headers; None prints as "-", a key a row lacks as blank."""
    cells = [[header for _, header in columns]] + [
        [as_text(row.get(key)) if key in row else "" for key, _ in columns]
        for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())


def _runs_tables(runs: list[dict[str, Any]]) -> list[Table]:
    """One line per component; the run's own columns on its first line."""
    rows = []
    for run in runs:
        for index, component in enumerate(run["components"] or [{}]):
            first = {"run": run["run"], "status": run["status"], "start": run["start"],
                     "run_seconds": run["duration_s"],
                     "engine": run["engine"] or "-", "spans": run["spans"] or "-"
                     } if index == 0 else {}
            rows.append({**first, **component})
    return [("", rows, [("run", "RUN"), ("status", "STATUS"), ("start", "STARTED"),
                        ("run_seconds", "SECONDS"), ("engine", "BEAM ENGINE"),
                        ("spans", "SPANS"),
                        ("component", "COMPONENT"),
                        ("state", "STATE"), ("duration_s", "SECONDS")])]


_ARTIFACT_COLUMNS: Columns = [("id", "ID"), ("type", "TYPE"), ("producer", "PRODUCER"),
                              ("run", "RUN"), ("uri", "URI"), ("properties", "PROPERTIES")]


def _lineage_tables(result: dict[str, Any]) -> list[Table]:
    chain = _ARTIFACT_COLUMNS[:4] + [("inputs", "FROM")] + _ARTIFACT_COLUMNS[4:]
    tables: list[Table] = [(f"Lineage of artifact {result['target']}, back to the input file",
                            result["chain"], chain)]
    if len(result["models"]) > 1:  # a warm-started chain
        tables.append(("Models behind it, newest first (each warm-started from the next)",
                       result["models"], [("model", "MODEL"), ("run", "RUN"),
                                          ("trained_steps", "STEPS"),
                                          ("total_train_steps", "TOTAL STEPS")]))
    if result["hyperparameters"]:
        tables.append(("Trainer hyperparameters",
                       [{"name": k, "value": v} for k, v in result["hyperparameters"].items()],
                       [("name", "NAME"), ("value", "VALUE")]))
    return tables


def _models_tables(models: list[dict[str, Any]]) -> list[Table]:
    rows = [{**m, "serving": "<- serving" if m["serving"] else ""} for m in models]
    title = ("Eval split, sacreBLEU. 1REF: against the first reference (BLEU "
             f"{signature('bleu', 1)}; chrF {signature('chrf', 1)}). ALL: against every "
             "reference (nrefs:var). 1REF gates the Pusher.")
    return [(title, rows, [("model", "MODEL"), ("run", "RUN"), ("trained_steps", "STEPS"),
                           ("train_steps", "OF"), ("total_train_steps", "TOTAL"),
                           ("bleu_1ref", "BLEU-1REF"),
                           ("chrf_1ref", "CHRF-1REF"), ("bleu", "BLEU-ALL"),
                           ("chrf", "CHRF-ALL"), ("blessed", "BLESSED"),
                           ("pushed_version", "PUSHED"), ("serving", ""), ("uri", "URI")])]


def _diff_tables(result: dict[str, Any]) -> list[Table]:
    return [(f"A: {result['run_a']}\nB: {result['run_b']}", result["changes"],
             [("section", "SECTION"), ("key", "KEY"), ("a", "A"), ("b", "B")])]


# --- Commands -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Command:
    name: str
    help: str
    query: Callable[[Any, argparse.Namespace], Any]  # (store, args) -> plain data
    tables: Callable[[Any], list[Table]]
    arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None


def _artifacts_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--type", dest="type_name", metavar="TYPE",
                        help="only this artifact type, e.g. Examples, Model, PushedModel "
                             "(TFX's names, also for Kubeflow's tfx.Examples...)")
    parser.add_argument("--run", metavar="RUN",
                        help="only what this run's components output (cached ones included)")


def _diff_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", metavar="RUN_A", help="run id (or a unique prefix)")
    parser.add_argument("run_b", metavar="RUN_B")


_COMMANDS = (
    _Command("runs", "pipeline runs, newest first, with each component executed/cached/failed",
             lambda store, args: list_runs(store), _runs_tables),
    _Command("artifacts", "artifacts with producer, run and key properties",
             lambda store, args: list_artifacts(store, args.type_name, args.run),
             lambda rows: [("", rows, _ARTIFACT_COLUMNS)], _artifacts_arguments),
    _Command("lineage", "where a pushed model (or any artifact) came from, back to fra.txt",
             lambda store, args: lineage(store, args.ref), _lineage_tables,
             lambda parser: parser.add_argument(
                 "ref", metavar="PUSHED_VERSION|ARTIFACT_ID",
                 help="a pushed version (see `models`) or an artifact id (see `artifacts`)")),
    _Command("models", "trained models with BLEU/chrF, blessing, pushed version, serving one",
             lambda store, args: list_models(store), _models_tables),
    _Command("diff", "what changed between two runs: components, input, config, "
                     "hyperparameters, metrics",
             lambda store, args: diff_runs(store, args.run_a, args.run_b),
             _diff_tables, _diff_arguments),
)


def _handler(command: _Command) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        result = command.query(connect(store_config(args)), args)
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        for title, rows, columns in command.tables(result):
            if title:
                print(title)
            print_table(rows, columns)
            print()
        return 0
    return handle


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """`nmt metadata COMMAND [--json] [store flags]`."""
    parser = subparsers.add_parser("metadata", help="inspect runs, artifacts, lineage and "
                                                    "models in ML Metadata", description=__doc__)
    commands = parser.add_subparsers(dest="metadata_command", required=True)
    flags = store_flags()
    for command in _COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help,
                                  parents=[flags])
        command.arguments(sub)
        sub.add_argument("--json", action="store_true", help="print JSON for scripts")
        sub.set_defaults(handler=_handler(command))
