"""`nmt kubeflow submit|schedule --backend vertex`: google.cloud.aiplatform's PipelineJob and
its schedule, talking to a fake Vertex AI API on 127.0.0.1.

The fake answers the Vertex AI v1 REST calls aiplatform's REST transport makes
(POST .../pipelineJobs?pipelineJobId=..., POST .../schedules) with the resource as the real
API returns it (the request echoed, plus its `name`), errors in Google's JSON error format, and
the Cloud Storage JSON API calls PipelineJob.submit makes to check the pipeline root's bucket
(GET /storage/v1/b/BUCKET, reached through google-cloud-storage's STORAGE_EMULATOR_HOST). Stand-ins:
anonymous credentials instead of Application Default Credentials, and the project number that
aiplatform's bucket-ownership check asks Cloud Resource Manager for (which has no endpoint
override) is given directly.
"""
from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from google.auth.credentials import AnonymousCredentials

from helpers import send_json
from test_kubeflow import COMPILE_FLAGS, PIPELINE_ROOT, nmt_kubeflow

PARENT = "projects/nmt-project/locations/europe-west4"
PROJECT_NUMBER = 123456789


class FakeVertexApi(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_port}"
        self.requests: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.refusal: tuple[int, dict] | None = None

    def one(self, method: str, path: str) -> tuple[dict[str, list[str]], Any]:
        calls = [(query, body) for m, p, query, body in self.requests if (m, p) == (method, path)]
        assert len(calls) == 1, (method, path, [(m, p) for m, p, *_ in self.requests])
        return calls[0]

    def respond(self, method: str, path: str, body: Any) -> tuple[int, dict]:
        if path.startswith("/storage/v1/b/"):  # the pipeline root's bucket exists
            return 200, {"name": path.rsplit("/", 1)[-1], "kind": "storage#bucket",
                         "projectNumber": str(PROJECT_NUMBER)}
        if self.refusal:
            return self.refusal
        if (method, path) == ("POST", f"/v1/{PARENT}/pipelineJobs"):
            return 200, {**body, "name": f"{PARENT}/pipelineJobs/nightly-1",
                         "state": "PIPELINE_STATE_PENDING"}
        if (method, path) == ("POST", f"/v1/{PARENT}/schedules"):
            return 200, {**body, "name": f"{PARENT}/schedules/4242", "state": "ACTIVE"}
        return 404, {"error": {"code": 404, "message": f"no route {method} {path}",
                               "status": "NOT_FOUND"}}


class _Handler(BaseHTTPRequestHandler):
    server: FakeVertexApi

    def _answer(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw) if raw else None
        self.server.requests.append((self.command, url.path, urllib.parse.parse_qs(url.query),
                                     body))
        status, payload = self.server.respond(self.command, url.path, body)
        send_json(self, status, payload)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def vertex_api(monkeypatch):
    server = FakeVertexApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", server.url)
    monkeypatch.setattr("google.auth.default",
                        lambda *args, **kwargs: (AnonymousCredentials(), "nmt-project"))
    monkeypatch.setattr("google.cloud.aiplatform.utils.resource_manager_utils.get_project_number",
                        lambda project, **kwargs: PROJECT_NUMBER)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def vertex_package(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("vertex") / "pipeline.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", "vertex", "--output", path) == 0
    return path


def vertex_flags(api: FakeVertexApi) -> tuple[str, ...]:
    return ("--backend", "vertex", "--project", "nmt-project", "--region", "europe-west4",
            "--api-endpoint", api.url)


def test_submit_creates_a_pipeline_job_from_the_compiled_template(vertex_api, vertex_package,
                                                                   capsys, caplog):
    code = nmt_kubeflow("submit", "--package", vertex_package, *vertex_flags(vertex_api),
                        "--param", "data_root=gs://nmt-bucket/2025-06",
                        "--param", 'trainer_config={"profile": "base", "min_bleu": 25}',
                        "--pipeline-root", "gs://other-bucket/runs", "--name", "nightly",
                        "--service-account", "runner@nmt-project.iam.gserviceaccount.com")
    out, err = capsys.readouterr()
    assert code == 0, err
    query, job = vertex_api.one("POST", f"/v1/{PARENT}/pipelineJobs")
    assert query["pipelineJobId"][0].startswith("nmt-fra-eng-")
    assert job["displayName"] == "nightly"
    with open(vertex_package, encoding="utf-8") as f:
        assert job["pipelineSpec"] == yaml.safe_load(f)
    runtime = job["runtimeConfig"]
    assert runtime["gcsOutputDirectory"] == "gs://other-bucket/runs"
    assert runtime["parameterValues"]["data_root"] == "gs://nmt-bucket/2025-06"
    trainer_config = json.loads(runtime["parameterValues"]["trainer_config"])
    # Merged over the compiled default; a new profile needs the threshold its gate judges by.
    assert (trainer_config["profile"], trainer_config["min_bleu"]) == ("base", 25)
    assert trainer_config["checkpoint_root"] == PIPELINE_ROOT + "/checkpoints"
    assert job["serviceAccount"] == "runner@nmt-project.iam.gserviceaccount.com"
    # aiplatform checks that the root's bucket exists and belongs to the project.
    assert ("GET", "/storage/v1/b/other-bucket") in {(m, p) for m, p, *_ in vertex_api.requests}
    assert not [record for record in caplog.records if record.exc_info]
    assert (f"Pipeline job {PARENT}/pipelineJobs/nightly-1 of pipeline nmt-fra-eng: "
            "https://console.cloud.google.com/vertex-ai/locations/europe-west4/pipelines/runs/"
            "nightly-1?project=nmt-project") in out


def test_schedule_creates_a_vertex_schedule_of_that_job(vertex_api, vertex_package, capsys):
    code = nmt_kubeflow("schedule", "--package", vertex_package, *vertex_flags(vertex_api),
                        "--cron", "TZ=Europe/Paris 0 3 * * *")
    out, err = capsys.readouterr()
    assert code == 0, err
    _, schedule = vertex_api.one("POST", f"/v1/{PARENT}/schedules")
    assert schedule["cron"] == "TZ=Europe/Paris 0 3 * * *"  # Vertex takes 5 fields as they are
    assert schedule["maxConcurrentRunCount"] == "1"
    request = schedule["createPipelineJobRequest"]
    assert request["parent"] == PARENT
    assert request["pipelineJob"]["runtimeConfig"]["gcsOutputDirectory"] == PIPELINE_ROOT
    assert request["pipelineJob"]["pipelineSpec"]["pipelineInfo"]["name"] == "nmt-fra-eng"
    assert f"Schedule (cron 'TZ=Europe/Paris 0 3 * * *') {PARENT}/schedules/4242" in out


def test_submit_compiles_for_vertex_when_not_given_a_package(vertex_api, capsys):
    assert nmt_kubeflow("submit", *COMPILE_FLAGS, *vertex_flags(vertex_api)) == 0, (
        capsys.readouterr().err)
    _, job = vertex_api.one("POST", f"/v1/{PARENT}/pipelineJobs")
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    assert [t for t in tasks if t.startswith("latest_blessed_model_resolver")]


def test_a_refused_vertex_request_is_one_line(vertex_api, vertex_package, capsys):
    vertex_api.refusal = (403, {"error": {"code": 403, "status": "PERMISSION_DENIED",
                                          "message": "Permission 'aiplatform.pipelineJobs."
                                                     "create' denied on resource."}})
    assert nmt_kubeflow("submit", "--package", vertex_package, *vertex_flags(vertex_api)) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"nmt: error: Vertex AI ({vertex_api.url}) refused the pipeline job: 403 Permission "
        "'aiplatform.pipelineJobs.create' denied on resource.")


def test_a_vertex_package_is_refused_by_open_source_kfp(vertex_package, capsys):
    assert nmt_kubeflow("submit", "--package", vertex_package, "--host", "http://127.0.0.1:9") == 2
    assert capsys.readouterr().err == (
        f"nmt: error: {vertex_package} was compiled with --backend vertex: open-source KFP "
        "cannot run its resolver steps; compile it with --backend kfp, or submit it with "
        "--backend vertex\n")


def test_vertex_needs_a_project(vertex_package, capsys, monkeypatch):
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    assert nmt_kubeflow("submit", "--package", vertex_package, "--backend", "vertex") == 2
    assert capsys.readouterr().err == (
        "nmt: error: --backend vertex needs --project (or $GOOGLE_CLOUD_PROJECT)\n")

