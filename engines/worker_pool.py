"""Beam's pool of Python SDK worker processes for a local Flink run, on localhost only.

Beam's own `worker_pool_main` listens on every network interface without authentication: on
a shared network anyone could ask it to start a worker that runs their code. This serves the
same servicer (one `python` SDK worker process per request) on localhost, with the workers
kept apart per TaskManager (`WorkerPool`).

    python -m engines.worker_pool --port=PORT
"""
from __future__ import annotations

import argparse
import logging
import subprocess
import threading
import time

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import (BeamFnExternalWorkerPoolServicer,
                                                          kill_process_gracefully)
from apache_beam.utils import thread_pool_executor

_LOG = logging.getLogger(__name__)
# How long a StopWorker for an id that several running workers share waits for one of them to
# end by itself: the runner closes its worker's control stream before asking the pool to stop
# it, and the worker then exits within a second or two.
STOP_GRACE_S = 10.0


class WorkerPool(BeamFnExternalWorkerPoolServicer):
    """Beam's servicer, safe for several TaskManagers on one pool.

    Each TaskManager names its workers from its own counter ("1-1", "2-1", ...), so two
    TaskManagers that share a pool (a session cluster on one machine) ask for the same ids.
    Beam's servicer keeps one process per id: the second replaced the first, and the first
    TaskManager's StopWorker then killed the second's worker in the middle of its job (16x
    data: ExampleGen's job failed with "CANCELLED: client cancelled", docs/scaling.md). Here
    every process of an id is kept, and a StopWorker stops one only when it cannot be another
    TaskManager's: the one that has exited, or the id's only process."""

    def __init__(self) -> None:
        super().__init__(use_process=True)
        self._lock = threading.Lock()
        self._workers: dict[str, list[subprocess.Popen]] = {}

    def StartWorker(self, request: beam_fn_api_pb2.StartWorkerRequest, context
                    ) -> beam_fn_api_pb2.StartWorkerResponse:
        with self._lock:  # Beam's servicer files the process under the id: take it from there
            response = super().StartWorker(request, context)
            process = self._worker_processes.pop(request.worker_id, None)
            if process is not None:
                self._workers.setdefault(request.worker_id, []).append(process)
        return response

    def StopWorker(self, request: beam_fn_api_pb2.StopWorkerRequest, context
                   ) -> beam_fn_api_pb2.StopWorkerResponse:
        worker_id = request.worker_id
        deadline = time.monotonic() + STOP_GRACE_S
        while True:
            with self._lock:
                processes = self._workers.get(worker_id, [])
                ended = [p for p in processes if p.poll() is not None]
                if ended or len(processes) <= 1 or time.monotonic() >= deadline:
                    stop = ended[:1] or (list(processes) if len(processes) == 1 else [])
                    for process in stop:
                        processes.remove(process)
                    if not processes:
                        self._workers.pop(worker_id, None)
                    break
            time.sleep(0.1)
        for process in stop:
            if process.poll() is None:
                _LOG.info("Stopping worker %s", worker_id)
                kill_process_gracefully(process)
        if processes and not stop:
            _LOG.warning("Worker %s: %d TaskManagers' workers carry this id and none ended "
                         "within %.0f s; left running (each ends with its TaskManager's "
                         "connection).", worker_id, len(processes), STOP_GRACE_S)
        return beam_fn_api_pb2.StopWorkerResponse()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    # Without SO_REUSEPORT (gRPC's default on Linux), a second pool on a port already served
    # fails to bind instead of sharing it: flink.start_server then tries another port.
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                         options=[("grpc.http2.max_pings_without_data", 0),
                                  ("grpc.http2.max_ping_strikes", 0),
                                  ("grpc.so_reuseport", 0)])
    server.add_insecure_port(f"localhost:{args.port}")
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(WorkerPool(), server)
    server.start()
    logging.info("Beam SDK worker pool listening on localhost:%d", args.port)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
