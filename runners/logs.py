"""Console logging that tells a user what the pipeline is doing, without library noise.

TFX, Beam and TF log hundreds of INFO lines per component (protos, deployment configs).
By default we show our own INFO lines, TFX's component start/finish/cache lines, and every
warning except the known library ones below that a user can do nothing about; `--verbose`
shows everything.
"""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import re
import subprocess
import sys

_OUR_PACKAGES = ("cli", "pipeline", "runners", "engines", "inference", "metadata", "components",
                 "transform_module", "trainer_module")
# Where those packages are (a library's own "components/" directory is not ours).
_PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))).replace(os.sep, "/")
_TFX_PROGRESS = re.compile(r"^(Component .* is (running|finished)|A cached execution)")
# The libraries that run the components: we call them, they call TensorFlow.
_LIBRARIES = ("tfx", "tfx_bsl", "tensorflow_transform", "tensorflow_model_analysis",
              "tensorflow_data_validation", "apache_beam")


class _ProgressFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.name.split(".")[0] in _OUR_PACKAGES:
            return True
        return bool(_TFX_PROGRESS.match(str(record.msg)))


@dataclasses.dataclass(frozen=True)
class _Noise:
    """One library warning: the logger it goes to, the file that logs it, how it starts."""
    logger: str
    source: str  # path of the logging module, from its package directory on
    message: str

    def matches(self, path: str, message: str) -> bool:
        """Whether a record logged from the file at `path` with `message` is this warning."""
        return path.replace(os.sep, "/").endswith(self.source) and message.startswith(self.message)


_KNOWN_NOISE = (
    # TFX 1.16 tfx/orchestration/portable/input_resolution/channel_resolver.py tests
    # `if artifact_query.property_predicate:`, and an unset protobuf message field is truthy,
    # so it warns once for every input channel of every component (its ContextQuery check
    # uses HasField). Nothing in this pipeline sets a predicate.
    _Noise("absl", "tfx/orchestration/portable/input_resolution/channel_resolver.py",
           "ArtifactQuery.property_predicate is not supported."),
    # tf.Transform's graph analysis (tensorflow_transform/graph_tools.py) traces every
    # preprocessing_fn in a tf.function under TF2 and so warns about each vocabulary lookup
    # table; the tables are TFT's own (tensorflow/transform#284 shows the same lines for
    # tft.compute_and_apply_vocabulary), not something the preprocessing code can lift.
    _Noise("absl", "tensorflow_transform/graph_tools.py",
           "Tables initialized inside a tf.function"),
    # TFX 1.16's Transform writes transformed_examples without the payload_format custom
    # property; tfx/components/util/examples_utils.py then assumes FORMAT_TF_EXAMPLE, which is
    # what Transform wrote. Nothing to fix on our side.
    _Noise("absl", "tfx/components/util/examples_utils.py",
           "Examples artifact does not have payload_format custom property."),
    # Beam 2.59 (pinned by TFX 1.16) computes TFRecord checksums with python-snappy < 0.7 only
    # (apache/beam#33407); the google-crc32c it now prefers came in a later Beam
    # (apache/beam#34226). Our TFRecords are a few MB, so the slower checksum costs nothing.
    _Noise("apache_beam.io.tfrecordio", "apache_beam/io/tfrecordio.py",
           "Couldn't find python-snappy"),
    # `nmt run --to C` is a TFX partial run; on a pipeline root with no earlier run TFX 1.16
    # finds no base run to link it to (partial_run_utils.put_parent_context), says so as a
    # warning with a context proto, and runs every component anyway.
    _Noise("absl", "tfx/orchestration/portable/partial_run_utils.py", "base run context "),
)


class _KnownNoiseFilter(logging.Filter):
    """Drops the `_KNOWN_NOISE` warnings of one logger."""

    def __init__(self, logger: str) -> None:
        super().__init__()
        self.noise = [n for n in _KNOWN_NOISE if n.logger == logger]

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n.matches(record.pathname, record.getMessage()) for n in self.noise)


class _LibraryDeprecationFilter(logging.Filter):
    """Drops TensorFlow's "From FILE:LINE: NAME is deprecated" notices about calls made inside
    the libraries that run the components (TFMA 0.47 still reads its results with
    tf_record_iterator, for one): only their maintainers can change the call. Others stay,
    our own code's among them (TF names its dispatch wrapper as the caller of many ops)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not (str(record.msg).startswith("From %s: ") and record.args
                and "deprecated" in str(record.msg)):
            return True
        call_site = str(record.args[0]).replace(os.sep, "/")
        return not any(f"/{library}/" in call_site for library in _LIBRARIES)


# Beam's multi_processing workers send their log records to the runner, which logs each one as
# "Worker: <its LogEntry proto as text>" (apache_beam/runners/portability/local_job_service.py).
_WORKER_RELAY = "apache_beam.runners.portability.local_job_service"
_WORKER_NOISE = (
    # Beam 2.59's worker start-up under the DirectRunner: it has no staging directory and is
    # handed the runner's own options; both are about the local runner, not the pipeline.
    "No semi_persistent_directory found",
    "Discarding unparseable args",
)


class _WorkerLogFilter(logging.Filter):
    """Unwraps what Beam's worker processes log: our own records read as if logged here (so
    "Learned english_vocab ..." shows in multi_processing too), `_WORKER_NOISE` and
    `_KNOWN_NOISE` are dropped, and anything else stays as Beam relays it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "Worker: %s" or not record.args:
            return True
        from apache_beam.portability.api import beam_fn_api_pb2
        from google.protobuf import text_format

        entry = beam_fn_api_pb2.LogEntry()
        try:
            text_format.Parse(str(record.args[0]), entry)
        except text_format.ParseError:
            return True
        location = entry.log_location.replace(os.sep, "/")  # "path:line"
        # The library code behind _KNOWN_NOISE runs in the workers too (TFRecord checksums).
        if entry.message.startswith(_WORKER_NOISE) or any(
                noise.matches(location.rsplit(":", 1)[0], entry.message)
                for noise in _KNOWN_NOISE):
            return False
        package = next((p for p in _OUR_PACKAGES if location.startswith(f"{_PROJECT}/{p}/")),
                       None)
        if package:
            record.name, record.msg, record.args = package, entry.message, ()
        return True


_LOGGER_FILTERS = {
    **{logger: _KnownNoiseFilter(logger) for logger in {n.logger for n in _KNOWN_NOISE}},
    "tensorflow": _LibraryDeprecationFilter(),
    _WORKER_RELAY: _WorkerLogFilter(),
}

# Lines that TensorFlow's C++ code writes to file descriptor 2 itself: absl logging before
# anything calls absl::InitializeLog() ignores TF_CPP_MIN_LOG_LEVEL
# (tensorflow/tensorflow#100442), so only the bytes can be filtered.
_NATIVE_NOISE = re.compile(
    # Grappler cannot estimate the cost of a Softmax whose input rank is unknown (the
    # attention weights of a SavedModel's functions) and prints the op as a protobuf line
    # each time it optimizes one, e.g. when the Evaluator loads the model; the graph runs
    # the same (tensorflow/tensorflow#50575, closed without a fix).
    rb'op_level_cost_estimator\.cc:\d+\] Error in PredictCost\(\) for the op: op: "Softmax"'
    # absl's note that precedes the first such line; it says nothing about the run.
    rb"|^WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    rb"STDERR"
    # The SentencePiece library's note, each time tensorflow-text's tokenizer op loads the
    # vocabulary (in Transform, the Trainer, the Evaluator), that the model does no
    # normalization of its own: preprocessing.normalize has done it, by design.
    rb"|normalizer\.cc\(\d+\) LOG\(INFO\) precompiled_charsmap is empty\. use identity "
    rb"normalization\.")
# A traceback that Beam's worker processes print as they exit: TF 2.16's AtomicFunction.__del__
# reads the module global RUNTIME_FUNCTION_REFS, which interpreter shutdown has already set to
# None; the work is done by then. Dropped: this header, the traceback lines, and that TypeError.
_SHUTDOWN_TRACEBACK = (rb"^Exception ignored in: <function AtomicFunction\.__del__",
                       rb"^TypeError: 'NoneType' object is not subscriptable")
# Runs in a child process, so that a crash of `nmt` (a C++ abort, a kill) loses nothing it
# wrote: the child forwards every other line until the last writer closes the pipe.
_FORWARD_STDERR = """
import re, sys
noise, header, last = (re.compile(a.encode("latin-1")) for a in sys.argv[1:4])
in_traceback = False
for line in sys.stdin.buffer:
    if in_traceback:
        if line.startswith((b"Traceback (most recent call last):", b"  File ", b"    ")):
            continue
        in_traceback = False
        if last.search(line):
            continue
    if header.search(line):
        in_traceback = True
    elif not noise.search(line):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
"""
_native_filter: subprocess.Popen | None = None


def _filter_native_stderr() -> None:
    """Routes file descriptor 2 (Python's stderr and C++ logs alike) through a child process
    that drops `_NATIVE_NOISE` lines; at exit, waits for it to write the last lines."""
    global _native_filter
    if _native_filter is not None:
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    # A session of its own: Ctrl-C interrupts `nmt`, whose last words the child must forward.
    _native_filter = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _FORWARD_STDERR,
         *(p.decode("latin-1") for p in (_NATIVE_NOISE.pattern, *_SHUTDOWN_TRACEBACK))],
        stdin=read_end, stdout=terminal, start_new_session=True)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # closes our end of the pipe: the child sees its end
        os.close(terminal)
        try:
            _native_filter.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a process we started still holds the pipe
            pass

    atexit.register(restore)


def configure(verbose: bool = False) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    if not verbose:
        handler.addFilter(_ProgressFilter())
        for name, noise_filter in _LOGGER_FILTERS.items():
            logging.getLogger(name).addFilter(noise_filter)
        _filter_native_stderr()
        # Beam's worker processes inherit this: Google's client libraries warn at import
        # about Python versions they will drop one day (cli/main.py filters it here).
        os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    # TFX reports progress through absl's logger, whose level tf.saved_model.save (run by
    # Transform and Trainer) raises to WARNING as a side effect: pin it at INFO.
    absl_logger = logging.getLogger("absl")
    absl_logger.setLevel(logging.INFO)
    absl_logger.setLevel = lambda level: None
    # TensorFlow's logger prints through a handler of its own: route it through ours.
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.handlers.clear()
    tf_logger.propagate = True
