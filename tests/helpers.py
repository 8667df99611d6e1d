"""Helpers shared by the test modules (fixtures are in conftest.py)."""
from __future__ import annotations

import io
import json
import os
import re
import resource
import signal
import subprocess
import sys

import tensorflow as tf
from tfx.dsl.io import filesystem, filesystem_registry

from components.fra_example_gen.records import split_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIPELINE_NAME = "nmt-fra-eng"
SMOKE_TRAIN_STEPS = 200
# The data half: ExampleGen -> StatisticsGen -> schema -> validator (no training).
DATA_HALF = ("--to", "StrictExampleValidator")


# The non-core ops a SavedModel may use: tensorflow-text ops that TF Serving 2.12 links in.
# tensorflow/serving 2.12.0, tensorflow_serving/model_servers/BUILD: SUPPORTED_TENSORFLOW_OPS
# includes "@org_tensorflow_text//tensorflow_text:ops_lib", and tensorflow_serving/workspace.bzl
# pins org_tensorflow_text to tensorflow/text v2.12.1, whose tensorflow_text/BUILD `ops_lib`
# depends on the libraries registering each op below (REGISTER_OP in the file named).
TF_SERVING_2_12_TEXT_OPS = {
    "NormalizeUTF8": ":normalize_ops_cc, tensorflow_text/core/ops/normalize_ops.cc",
    "WordpieceTokenizeWithOffsets": ":wordpiece_tokenizer_cc, "
                                    "tensorflow_text/core/ops/wordpiece_op.cc",
    "SentencepieceOp": ":sentencepiece_tokenizer_cc, "
                       "tensorflow_text/core/ops/sentencepiece_ops.cc",
    "SentencepieceTokenizeOp": ":sentencepiece_tokenizer_cc, "
                               "tensorflow_text/core/ops/sentencepiece_ops.cc",
}


def ops_core_tensorflow_lacks(saved_model_pb: str) -> list[str]:
    """Every op of a saved_model.pb (graph and all functions), read in a fresh process that
    never imports tensorflow_text: those core TensorFlow does not know, sorted."""
    script = (
        "import json, sys, tensorflow as tf\n"
        "from tensorflow.core.protobuf import saved_model_pb2\n"
        "from tensorflow.python.framework import op_def_registry\n"
        "saved = saved_model_pb2.SavedModel.FromString(open(sys.argv[1], 'rb').read())\n"
        "ops, functions = set(), set()\n"
        "for graph in saved.meta_graphs:\n"
        "    ops |= {node.op for node in graph.graph_def.node}\n"
        "    for function in graph.graph_def.library.function:\n"
        "        functions.add(function.signature.name)\n"
        "        ops |= {node.op for node in function.node_def}\n"
        "print(json.dumps({'ops': len(ops), 'text_loaded': 'tensorflow_text' in sys.modules,\n"
        "                  'unknown': sorted(o for o in ops - functions\n"
        "                                    if op_def_registry.get(o) is None)}))\n")
    result = subprocess.run([sys.executable, "-c", script, saved_model_pb],
                            capture_output=True, text=True, cwd="/", timeout=300,
                            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["text_loaded"] is False and found["ops"] > 20
    return found["unknown"]


def send_json(handler, status: int, payload) -> None:
    """A fake HTTP server's JSON answer (BaseHTTPRequestHandler), as the real APIs send it."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def kill_on_log_line(log: subprocess.Popen, marker: str, victim: subprocess.Popen) -> str:
    """Reads `log`'s stderr until a line contains `marker`, then SIGKILLs `victim`'s process
    group (a kill at a known point of a run); returns what was read."""
    lines = []
    for line in log.stderr:
        lines.append(line)
        if marker in line:
            os.killpg(victim.pid, signal.SIGKILL)
            break
    return "".join(lines)


def sample_lines(path: str, block: int = 100, every: int = 50) -> list[bytes]:
    """Contiguous blocks of lines spread over the file, so sentences keep all references."""
    with open(path, "rb") as f:
        lines = f.readlines()
    return [line for i, line in enumerate(lines) if (i // block) % every == 0]


def run_nmt(*args: str, env: dict | None = None, timeout: float = 900,
            **kwargs) -> subprocess.CompletedProcess:
    """Runs the `nmt` CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def run_nmt_with_file_size_limit(limit_bytes: int, *args: str) -> subprocess.CompletedProcess:
    """`nmt ARGS` in a child that cannot write a file beyond `limit_bytes`: a full disk without
    root. SIGXFSZ is ignored (inherited through exec), so writes fail with EFBIG instead of
    killing the process."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return run_nmt(*args, preexec_fn=limit)


# Runs a command and prints its peak resident memory in bytes and its exit code. Linux starts
# an exec'd process's peak at that of the memory it was spawned from, and subprocess spawns
# with vfork: measured straight from pytest, nmt's peak would include the pytest worker's
# (gigabytes after the TensorFlow tests). Spawned from this small launcher, it is its own.
_PEAK_OF_CHILD = ("import os, subprocess, sys\n"
                  "child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
                  "_, status, usage = os.wait4(child.pid, 0)\n"
                  "print(usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status))\n")


def run_nmt_peak_memory(*args: str) -> tuple[subprocess.CompletedProcess, int]:
    """`nmt ARGS` and the peak resident memory of its process, in bytes."""
    command = [sys.executable, "-m", "cli", *args]
    launched = subprocess.run([sys.executable, "-c", _PEAK_OF_CHILD, *command], cwd=REPO,
                              capture_output=True, text=True)
    peak, returncode = map(int, launched.stdout.split())
    return subprocess.CompletedProcess(command, returncode, "", launched.stderr), peak


def smoke_args(data: str, root: str, train_steps: int) -> list[str]:
    return ["run", "--data", data, "--pipeline-root", root, "--profile", "smoke",
            "--train-steps", str(train_steps)]


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def cached_components(stderr: str) -> int:
    return stderr.count("A cached execution")


def checkpoint_steps(log: str) -> list[int]:
    """Steps of the Trainer's 'Checkpoint at step N' lines (one per checkpoint, never
    throttled, unlike the progress lines)."""
    return [int(step) for step in re.findall(r"Checkpoint at step (\d+):", log)]


def open_store(pipeline_root: str):
    import ml_metadata as mlmd
    from ml_metadata.proto import metadata_store_pb2

    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = os.path.join(pipeline_root, "metadata.sqlite")
    return mlmd.MetadataStore(config)


def latest_artifact(store, type_name: str, producer: str | None = None):
    """The newest artifact of a type, optionally only those written by one component."""
    artifacts = [a for a in store.get_artifacts_by_type(type_name)
                 if producer is None or f"/{producer}/" in a.uri]
    return max(artifacts, key=lambda a: a.id)


def live_artifacts(root: str, type_name: str) -> list:
    """Published artifacts of a type (a failed execution publishes none)."""
    from ml_metadata.proto import metadata_store_pb2

    if not os.path.exists(os.path.join(root, "metadata.sqlite")):
        return []
    return [a for a in open_store(root).get_artifacts_by_type(type_name)
            if a.state == metadata_store_pb2.Artifact.LIVE]


def serving_dir(root: str) -> str:
    return os.path.join(root, "serving", PIPELINE_NAME)


def versions(root: str) -> list[str]:
    """Everything in the serving directory (TF Serving loads the integer names)."""
    return sorted(os.listdir(serving_dir(root))) if os.path.isdir(serving_dir(root)) else []


def nmt_translate(root: str, *args: str, stdin: bytes | None = None,
                  env: dict[str, str] | None = None):
    return subprocess.run([sys.executable, "-m", "cli", "translate", "--pipeline-root",
                           root, *args], cwd=REPO, input=stdin, capture_output=True,
                          timeout=300, env=env)


def split_records(examples_uri: str) -> dict[str, list[bytes]]:
    """Each split's serialized records, sorted: what ExampleGen promises is the same records in
    the same split, not their order. TFX's WriteSplit reshuffles before writing, and even the
    in-memory DirectRunner once moved 99 of 1,950 records (a CI run at 6bcf403). Files only:
    Transform's job restarted by Flink leaves its killed attempt's `beam-temp-*` directory."""
    return {split: sorted(r.numpy() for r in tf.data.TFRecordDataset(
        split_files(examples_uri, split), compression_type="GZIP"))
        for split in ("train", "eval", "test")}


def make_model_dir(path, graph: bytes = b"graph", extra_variables: int = 0) -> str:
    """A directory shaped like a SavedModel (what the Pusher copies), with known bytes."""
    (path / "variables").mkdir(parents=True)
    (path / "variables" / "variables.index").write_bytes(b"index")
    for i in range(extra_variables):
        (path / "variables" / f"variables.data-{i:05d}-of-{extra_variables:05d}").write_bytes(
            bytes([i]) * 100)
    (path / "saved_model.pb").write_bytes(graph)
    return str(path)


class FakeObjectStore(filesystem.Filesystem):
    """An object store in memory (`fakeobj://`): flat keys, listings in key order, no atomic
    rename (copy every object, then delete). `observe` runs after every single write or delete,
    as a reader polling the bucket would."""

    SUPPORTED_SCHEMES = ["fakeobj://"]
    objects: dict[str, bytes] = {}
    observe = staticmethod(lambda: None)

    @classmethod
    def _put(cls, key: str, data: bytes) -> None:
        cls.objects[key] = data
        cls.observe()

    @classmethod
    def _delete(cls, key: str) -> None:
        del cls.objects[key]
        cls.observe()

    @classmethod
    def _under(cls, prefix: str) -> list[str]:
        prefix = prefix.rstrip("/") + "/"
        return sorted(k for k in cls.objects if k.startswith(prefix))

    @classmethod
    def open(cls, name, mode="r"):
        if "r" in mode:
            if name not in cls.objects:
                raise filesystem.NotFoundError(name)
            data = cls.objects[name]
            return io.BytesIO(data) if "b" in mode else io.StringIO(data.decode())

        class Upload(io.BytesIO):  # an object appears whole when the upload completes
            def close(self_) -> None:
                if not self_.closed:
                    cls._put(name, self_.getvalue())
                super().close()

        return Upload()

    @classmethod
    def copy(cls, src, dst, overwrite=False):
        if not overwrite and dst in cls.objects:
            raise OSError(f"{dst} exists")
        cls._put(dst, cls.objects[src])

    @classmethod
    def exists(cls, path):
        return path in cls.objects or cls.isdir(path)

    @classmethod
    def isdir(cls, path):
        return bool(cls._under(path))

    @classmethod
    def listdir(cls, path):
        prefix = path.rstrip("/") + "/"
        return sorted({k[len(prefix):].split("/")[0] for k in cls._under(path)})

    @classmethod
    def makedirs(cls, path):
        """Object stores have no directories."""

    mkdir = makedirs

    @classmethod
    def remove(cls, path):
        cls._delete(path)

    @classmethod
    def rmtree(cls, path):
        for key in cls._under(path):
            cls._delete(key)

    @classmethod
    def rename(cls, src, dst, overwrite=False):
        for key in cls._under(src):
            cls._put(dst.rstrip("/") + key[len(src.rstrip("/")):], cls.objects[key])
        for key in cls._under(src):
            cls._delete(key)

    @classmethod
    def walk(cls, top, topdown=True, onerror=None):
        raise NotImplementedError("the pusher walks the local model, not the bucket")


filesystem_registry.DEFAULT_FILESYSTEM_REGISTRY.register(FakeObjectStore, priority=1)
