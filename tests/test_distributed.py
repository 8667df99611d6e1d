"""GPU and multi-machine code paths, executed on this CPU with TensorFlow's own mechanisms.

- XLA and float16 run on the CPU: the `base` profile's GPU path at smoke size, compile count
  read from TensorFlow's own XLA compilation log; bfloat16 without XLA, a CPU's path. Both
  export a float32 model.
- Logical CPU devices stand in for GPUs under MirroredStrategy.
- MultiWorkerMirroredStrategy runs between two processes on 127.0.0.1 (TF_CONFIG), through the
  real `run_fn`.
Each check runs in a process of its own (tests/distributed_worker.py).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from helpers import kill_on_log_line
from trainer_module import callbacks, task

pytestmark = pytest.mark.distributed

WORKER = os.path.join(REPO, "tests", "distributed_worker.py")
_XLA_LOG = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "device_compilation_profiler=1"}
# "Compiled __inference_run_step_123 4 times, ...": one line per XLA compilation.
_COMPILED = re.compile(r"Compiled (__inference_\w+) (\d+) times")


def _worker(*args: str, env: dict | None = None, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, *args], cwd=REPO, text=True,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True, **kwargs)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[str, str]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-5000:]
    return out, err


@pytest.fixture(scope="module")
def data_dir(fra_txt, tmp_path_factory) -> str:
    """A tf.Transform output (real preprocessing_fn) and transformed train/eval examples."""
    path = str(tmp_path_factory.mktemp("distributed") / "data")
    _finish(_worker("transform", fra_txt, path))
    return path


def _mixed_run(data_dir: str, out_dir: str, precision: str, xla: bool) -> dict:
    """12 mixed-precision steps (XLA-compiled or not), then the float32 export."""
    _, log = _finish(_worker("mixed", data_dir, out_dir, precision, "12",
                             "xla" if xla else "no-xla", env=_XLA_LOG))
    with open(os.path.join(out_dir, "result.json")) as f:
        result = json.load(f)
    compiles = collections.Counter()
    for name, count in _COMPILED.findall(log):
        compiles[name] = max(compiles[name], int(count))
    return {**result, "out_dir": out_dir, "compiles": list(compiles.values()),
            "precision": precision}


@pytest.fixture(scope="module")
def xla_run(data_dir, tmp_path_factory) -> dict:
    """float16 with XLA: a GPU's precision, and the `base` profile's path there."""
    return _mixed_run(data_dir, str(tmp_path_factory.mktemp("xla")), "mixed_float16", True)


@pytest.fixture(scope="module")
def bfloat16_run(data_dir, tmp_path_factory) -> dict:
    """bfloat16 without XLA: what `auto` picks on a CPU with bfloat16 units, where the Trainer
    never uses XLA (trainer_module/devices.py)."""
    return _mixed_run(data_dir, str(tmp_path_factory.mktemp("bfloat16")), "mixed_bfloat16",
                      False)


@pytest.fixture(params=["xla_run", "bfloat16_run"])
def mixed_run(request) -> dict:
    return request.getfixturevalue(request.param)


def test_xla_compiles_once_per_length_bucket(xla_run):
    train, validation = xla_run["compiles"]  # Keras compiles the train step first
    buckets = xla_run["buckets"]
    assert train == len(xla_run["shapes"]) <= buckets
    assert validation <= 2 * buckets  # each bucket's full batches and its last partial one
    # Over 40 batches, padded to the bucket boundary they have at most one shape per bucket;
    # without that padding they have more.
    assert xla_run["padded_shapes"] <= buckets < xla_run["dynamic_shapes"]


def test_mixed_precision_trains_in_low_precision_and_exports_float32(mixed_run):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the NFKC op)
    import tensorflow_transform as tft
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.saved_model import loader_impl

    from trainer_module.export import Translator
    from trainer_module.hparams import HParams
    from trainer_module.model import Transformer

    assert mixed_run["mixed_compute_dtype"] == mixed_run["precision"].split("_")[1]
    export_dir = os.path.join(mixed_run["out_dir"], "export")
    graph = loader_impl.parse_saved_model(export_dir).meta_graphs[0]
    low = {types_pb2.DT_HALF, types_pb2.DT_BFLOAT16}
    nodes = [node for function in graph.graph_def.library.function
             for node in function.node_def] + list(graph.graph_def.node)
    assert nodes and not [n.name for n in nodes
                          if {a.type for a in n.attr.values()} & low]

    served = tf.saved_model.load(export_dir)
    signature = served.signatures["serving_default"]
    assert signature.structured_outputs["score"].dtype == tf.float32
    saved = tf.train.load_checkpoint(os.path.join(export_dir, "variables", "variables"))
    assert set(saved.get_variable_to_dtype_map().values()) - {tf.string} == {tf.float32}

    hparams = HParams(**{**mixed_run["hparams"], "precision": "float32"})
    reference = Transformer(hparams)
    reference((tf.ones([1, 1], tf.int32), tf.ones([1, 1], tf.int32)))
    with np.load(os.path.join(mixed_run["out_dir"], "weights.npz")) as weights:
        reference.set_weights([weights[f"arr_{i}"] for i in range(len(weights.files))])
    output = tft.TFTransformOutput(mixed_run["transform_output"])
    english = tf.constant(["I am hungry.", "Where is the station?", "Tom is here.", "Go."])
    expected = Translator(reference, output, hparams).translate(english)
    got = signature(english=english)
    # Same float32 weights, same float32 ops: only summation order may differ (~1e-6), far
    # below any gap between two candidate tokens of a trained model's argmax.
    assert got["translation"].numpy().tolist() == expected["translation"].numpy().tolist()
    np.testing.assert_allclose(got["score"], expected["score"], atol=1e-4)


def test_mirrored_strategy_over_two_devices_matches_one_device(data_dir):
    out, _ = _finish(_worker("mirrored", data_dir))
    result = json.loads(out.strip().splitlines()[-1])
    assert result["replicas"] == 2
    assert result["two_device_loss"] == pytest.approx(result["one_device_loss"], rel=1e-5)
    assert result["max_grad_difference"] < 1e-5 * max(result["grad_norm"], 1.0)
    # Averaging each replica's own token mean (Keras' default) would not match: the replicas'
    # batches hold very different numbers of tokens. How far off it is depends on the batches
    # (ExampleGen's record order is not fixed), so the test is the match above, not a margin.
    assert result["mean_of_replica_means"] != pytest.approx(result["one_device_loss"], rel=1e-5)
    # batch_tokens is per replica: a step of two replicas trains two whole batches.
    assert result["step_tokens"] == sum(result["first_batch_tokens"])


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@dataclasses.dataclass
class Cluster:
    root: str
    data_dir: str
    args: dict

    def start(self) -> list[subprocess.Popen]:
        """Both workers of a fresh TF_CONFIG cluster on 127.0.0.1 (worker 0 is the chief)."""
        workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
        procs = []
        for index in range(2):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker",
                                                                 "index": index}}
            fn_args = {**self.args,
                       "serving_model_dir": os.path.join(self.root, f"serving-{index}"),
                       "model_run_dir": os.path.join(self.root, f"run-{index}")}
            procs.append(_worker("run_fn", self.data_dir, json.dumps(fn_args),
                                 os.path.join(self.root, f"weights-{index}.json"),
                                 env={"TF_CONFIG": json.dumps(tf_config)}))
        return procs


@pytest.fixture(scope="module")
def multi_worker(data_dir, tmp_path_factory) -> dict:
    """Two workers train with a 45 s time budget (start-up and tracing included); worker 0
    (the chief) is killed after the first checkpoint (its partner then hangs in a collective
    and is stopped), then both re-run."""
    root = str(tmp_path_factory.mktemp("multi_worker"))
    cluster = Cluster(root, data_dir, {
        "train_steps": 0, "custom_config": {
            # Under load the first checkpoint can come after 30 s; the budget must outlast it.
            "profile": "smoke", "train_minutes": 0.75,
            "checkpoint_root": os.path.join(root, "checkpoints")}})
    chief, other = cluster.start()
    killed_log = kill_on_log_line(chief, "Checkpoint at step", other)
    os.killpg(chief.pid, signal.SIGKILL)
    for proc in (chief, other):
        proc.wait()
    killed_export = os.path.exists(os.path.join(root, "serving-0", "saved_model.pb"))
    logs = [_finish(proc)[1] for proc in cluster.start()]
    weights = []
    for index in range(2):
        with open(os.path.join(root, f"weights-{index}.json")) as f:
            weights.append(json.load(f))
    checkpoint_dirs = [d for d, _, files in os.walk(os.path.join(root, "checkpoints"))
                       if "checkpoint" in files and os.path.basename(d) != task.STATE_DIR]
    with open(os.path.join(checkpoint_dirs[0], "history.json")) as f:
        history = json.load(f)
    return {"root": root, "killed_log": killed_log, "killed_export": killed_export,
            "logs": logs, "weights": weights, "checkpoint_dirs": checkpoint_dirs,
            "history": history}


def test_multi_worker_workers_agree_and_one_copy_is_written(multi_worker):
    chief_log, other_log = multi_worker["logs"]
    assert "MultiWorkerMirroredStrategy, 2 replicas" in chief_log
    first, second = multi_worker["weights"]
    assert first == second  # identical variables (hash) after the same number of steps
    # The chief's clock decided the last step, at a step where the workers compare notes, and
    # both stopped after it.
    for log in (chief_log, other_log):
        stopped = re.search(r"budget ends training at step (\d+) \(decided at step (\d+)", log)
        assert stopped and int(stopped.group(1)) == first["step"]
        assert int(stopped.group(2)) % 10 == 0
    # One checkpoint series, no worker's temporary directory left behind.
    [directory] = multi_worker["checkpoint_dirs"]
    assert not [d for d in os.listdir(directory) if d.startswith(".")]
    # and the chief's training state for a later warm start (every worker saved it)
    assert callbacks.saved_state_step(os.path.join(directory, task.STATE_DIR)) > 0
    assert os.path.exists(os.path.join(multi_worker["root"], "serving-0", "saved_model.pb"))
    assert not os.path.exists(os.path.join(multi_worker["root"], "serving-1"))
    assert os.path.exists(os.path.join(multi_worker["root"], "run-0", "hparams.json"))
    assert not os.path.exists(os.path.join(multi_worker["root"], "run-1", "hparams.json"))
    assert "the chief exports the model" in other_log


def test_multi_worker_resumes_from_the_last_checkpoint(multi_worker):
    killed_at = int(re.findall(r"Checkpoint at step (\d+)", multi_worker["killed_log"])[-1])
    assert not multi_worker["killed_export"]
    chief_log = multi_worker["logs"][0]
    resumed = re.search(r"Resuming from \S+ \(step (\d+) of", chief_log)
    assert resumed and int(resumed.group(1)) >= killed_at
    steps = [entry["step"] for entry in multi_worker["history"]]
    assert steps[0] == killed_at and steps == sorted(set(steps))
    # The budget goes on from the time spent up to that checkpoint, not from zero.
    spent = re.search(r"budget, ([\d.]+) s of it spent\)", chief_log)
    assert spent and float(spent.group(1)) == multi_worker["history"][0]["train_seconds"] > 0
    assert steps[-1] == multi_worker["weights"][0]["step"]
