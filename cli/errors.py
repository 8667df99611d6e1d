"""What a command may raise, and the one place where an error ends `nmt`: one
`nmt: error:` line on stderr and an exit status, or a traceback for what nobody expected."""
from __future__ import annotations

import argparse
import sys


class UsageError(ValueError):
    """The flags do not make a command (exit status 2, as for argparse's own errors)."""


class CommandError(RuntimeError):
    """The command could not do its job (exit status 1); the message says why."""


# The errors a command expects, already worded for people, and the exit status of each: 2 when
# what the user gave cannot work (as for argparse's own errors), 1 when the job itself failed.
# Named by module, and matched only once that module is loaded (an exception of a module never
# imported cannot have been raised), so `nmt --help` loads neither TFX nor the KFP SDK.
# The first entry an error is an instance of decides.
EXPECTED_ERRORS: tuple[tuple[str, str, int], ...] = (
    (__name__, "UsageError", 2),
    ("pipeline.data_source", "DataSourceError", 2),  # no usable fra.txt
    # found before the run (in it: RunError)
    ("components.fra_example_gen.parser", "InputDataError", 2),
    ("inference.translate", "TranslateError", 2),
    ("inference.evaluation_set", "EvaluationSetError", 2),  # a test set nmt evaluate cannot read
    ("metadata.store", "MetadataError", 2),  # no store, an unknown run or artifact...
    ("runners.kfp_client", "UnsupportedStorageError", 2),  # an s3:// or minio:// path
    ("engines.flink", "EngineError", 2),  # no Java, no job server, no cluster at that address
    ("trainer_module.warm_start", "WarmStartError", 2),  # --warm-start cannot continue the base
    (__name__, "CommandError", 1),
    ("runners.run_lock", "RunError", 1),  # the run failed, or another one holds the root
    ("runners.kfp_client", "KfpError", 1),  # the KFP API refused or is unreachable
)


def exit_status(error: BaseException) -> int | None:
    """The exit status of an expected error; None for anything else (a bug: a traceback)."""
    for module, name, status in EXPECTED_ERRORS:
        expected = getattr(sys.modules.get(module), name, None)
        if expected is not None and isinstance(error, expected):
            return status
    return None


def run_handler(args: argparse.Namespace) -> int:
    """Runs the parsed command's handler; an expected error becomes one line and its status."""
    try:
        return args.handler(args)
    except Exception as err:  # noqa: BLE001  only the expected ones: the others re-raise
        status = exit_status(err)
        if status is None:
            raise
        print(f"nmt: error: {err}", file=sys.stderr)
        return status
