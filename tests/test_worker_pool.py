"""Beam's worker pool shared by two TaskManagers (engines/worker_pool.py): each names its SDK
workers from its own counter, so both ask the pool for worker "1-1". Real SDK worker
processes here, each connected to a control service of its own that speaks Beam's Fn API
control protocol as a TaskManager does (a stream that stays open until the TaskManager closes
its environment); no Flink. Beam's own servicer killed the other TaskManager's worker."""
from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

from engines import flink, worker_pool

pytestmark = pytest.mark.flink


class _TaskManagerControl(beam_fn_api_pb2_grpc.BeamFnControlServicer):
    """A TaskManager's side of one environment's control stream: open until `close`."""

    def __init__(self) -> None:
        self.connected, self.closed = threading.Event(), threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("localhost:0")
        self.server.start()

    def Control(self, request_iterator, context):
        self.connected.set()
        self.closed.wait()
        return iter(())

    def close(self) -> None:
        self.closed.set()
        self.server.stop(grace=1)


def _start(pool: worker_pool.WorkerPool, worker_id: str, control: _TaskManagerControl) -> None:
    response = pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
        worker_id=worker_id,
        control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{control.port}")),
        None)
    assert not response.error


def _wait(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_one_taskmanagers_stop_leaves_the_others_worker_of_the_same_id_running(monkeypatch):
    # The pool starts workers as `python`: this venv's, as the cluster's pool does.
    monkeypatch.setenv("PATH", flink.engine_env()["PATH"])
    pool = worker_pool.WorkerPool()
    first, second = _TaskManagerControl(), _TaskManagerControl()
    try:
        _start(pool, "1-1", first)
        _start(pool, "1-1", second)
        _wait(lambda: first.connected.is_set() and second.connected.is_set(),
              "both SDK workers connect to their TaskManager's control service")
        first_process, second_process = pool._workers["1-1"]

        # The first TaskManager closes its environment: its control stream, then StopWorker.
        first.close()
        pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), None)
        assert first_process.poll() is not None
        assert second_process.poll() is None, "the other TaskManager's worker was stopped"
        assert pool._workers["1-1"] == [second_process]

        # The id's only worker left: stopped as Beam's servicer stops it.
        pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), None)
        _wait(lambda: second_process.poll() is not None, "the id's only worker is stopped")
        assert "1-1" not in pool._workers
    finally:
        second.close()
        for process in pool._workers.get("1-1", []):
            process.kill()
