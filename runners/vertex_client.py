"""Runs or schedules the compiled pipeline on Vertex AI Pipelines (`--backend vertex`).

Vertex AI has no KFP REST API: a run is a PipelineJob (google.cloud.aiplatform), created from
the same YAML, and a recurring run is that PipelineJob's schedule. Authentication is Google's
Application Default Credentials (`gcloud auth application-default login`, or the service
account of the machine). Failures become KfpError, one line, as for KFP.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
from typing import Any, Iterator, Mapping

from google.api_core import exceptions as api_exceptions
from google.auth import exceptions as auth_exceptions

from runners.kfp_client import KfpError, Package, default_run_name

_CONSOLE = "https://console.cloud.google.com/vertex-ai"


@dataclasses.dataclass(frozen=True)
class Created:
    """A pipeline job or schedule: its resource name and its console page."""
    resource_name: str
    link: str


@dataclasses.dataclass(frozen=True)
class VertexEndpoint:
    """Where runs go: a project and region, optionally another API endpoint and run-as account."""
    project: str
    region: str
    service_account: str | None = None
    api_endpoint: str | None = None  # default: REGION-aiplatform.googleapis.com

    def _init(self) -> None:
        from google.cloud import aiplatform

        # REST, not gRPC: the same HTTPS calls from any network a browser works in.
        aiplatform.init(project=self.project, location=self.region, api_transport="rest",
                        api_endpoint=self.api_endpoint, service_account=self.service_account)


def _job(endpoint: VertexEndpoint, package: Package, params: Mapping[str, Any],
         name: str | None, pipeline_root: str | None) -> Any:
    from google.cloud import aiplatform

    endpoint._init()
    return aiplatform.PipelineJob(
        display_name=name or default_run_name(package),
        template_path=package.path, pipeline_root=pipeline_root,
        parameter_values=dict(params), project=endpoint.project, location=endpoint.region)


def submit(endpoint: VertexEndpoint, package: Package, params: Mapping[str, Any],
           run_name: str | None = None, pipeline_root: str | None = None) -> Created:
    """Creates one PipelineJob (a run) from the compiled YAML."""
    with _vertex_call(endpoint, "the pipeline job"):
        job = _job(endpoint, package, params, run_name, pipeline_root)
        job.submit(service_account=endpoint.service_account)
    return Created(job.resource_name, _link(endpoint, f"pipelines/runs/{job.name}"))


def schedule(endpoint: VertexEndpoint, package: Package, params: Mapping[str, Any],
             cron: str, job_name: str | None = None,
             pipeline_root: str | None = None) -> Created:
    """Creates a schedule that starts that PipelineJob on the cron (5 fields, optionally
    prefixed "TZ=Europe/Paris "), one run at a time."""
    with _vertex_call(endpoint, "the schedule"):
        job = _job(endpoint, package, params, None, pipeline_root)
        created = job.create_schedule(
            cron=cron, display_name=job_name or f"{package.name} ({cron})",
            max_concurrent_run_count=1, service_account=endpoint.service_account)
    schedule_id = created.resource_name.rsplit("/", 1)[-1]
    return Created(created.resource_name,
                   _link(endpoint, f"pipelines/schedules/{schedule_id}"))


def _link(endpoint: VertexEndpoint, page: str) -> str:
    return f"{_CONSOLE}/locations/{endpoint.region}/{page}?project={endpoint.project}"


@contextlib.contextmanager
def _vertex_call(endpoint: VertexEndpoint, what: str) -> Iterator[None]:
    """One line per failure. (aiplatform logs its own progress and links, which are kept.)"""
    where = endpoint.api_endpoint or f"{endpoint.region}-aiplatform.googleapis.com"
    try:
        yield
    except api_exceptions.GoogleAPICallError as err:
        # The REST transport prefixes the server's message with "METHOD URL: ".
        message = re.sub(r"^[A-Z]+ \S+: ", "", " ".join(str(err.message).split()))
        raise KfpError(f"Vertex AI ({where}) refused {what}: {err.code} {message}") from None
    except auth_exceptions.GoogleAuthError as err:
        raise KfpError(f"no Google credentials for Vertex AI ({what}): {err}; run `gcloud auth "
                       "application-default login` or use a service account") from None
    except (api_exceptions.RetryError, OSError) as err:
        raise KfpError(f"cannot reach Vertex AI at {where} ({what}): {err}") from None
