"""Beam's pool of Python SDK worker processes for a local Flink run, on localhost only.

Beam's own `worker_pool_main` listens on every network interface without authentication: on
a shared network anyone could ask it to start a worker that runs their code. This serves the
same servicer (one `python` SDK worker process per request) on localhost.

    python -m engines.worker_pool --port=PORT
"""
from __future__ import annotations

import argparse
import logging

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer
from apache_beam.utils import thread_pool_executor


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                         options=[("grpc.http2.max_pings_without_data", 0),
                                  ("grpc.http2.max_ping_strikes", 0)])
    server.add_insecure_port(f"localhost:{args.port}")
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
        BeamFnExternalWorkerPoolServicer(use_process=True), server)
    server.start()
    logging.info("Beam SDK worker pool listening on localhost:%d", args.port)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
