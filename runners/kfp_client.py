"""Talks to a Kubeflow Pipelines API: uploads the compiled pipeline, then runs or schedules it.

Everything goes through kfp.Client (the KFP v2beta1 REST API), so its authentication works
unchanged: a token, cookies, a service-account token file, or its KF_PIPELINES_* variables.
Failures become KfpError, one line saying what was refused or unreachable, never a traceback.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import hashlib
import io
import json
import logging
import warnings
from typing import Any, Iterator, Mapping, Sequence

import kfp
import kfp_server_api
import urllib3
import yaml
from kfp.client import ServiceAccountTokenVolumeCredentials

from trainer_module.settings import SettingsError, TrainerSettings

# Runtime parameter types TFX compiles (RuntimeParameter ptype str, int, float).
_PARAMETER_TYPES = {"STRING": str, "NUMBER_INTEGER": int, "NUMBER_DOUBLE": float}


class KfpError(RuntimeError):
    """The endpoint is unreachable or refused a request, or the request itself is unusable."""


class UnsupportedStorageError(KfpError):
    """A path the components could not read or write on the cluster."""


# TF 2.16 has no s3:// filesystem, and nothing in TFX speaks minio:// (KFP's default store).
UNSUPPORTED_SCHEMES = ("s3://", "minio://")


def check_storage(*named_paths: tuple[str, str | None]) -> None:
    """Refuses s3:// and minio:// paths, each given as (what it is, path), before anything is
    compiled or sent: a run would fail deep inside a component. Here, not in kubeflow_runner,
    so `submit --package` need not load TFX."""
    for what, path in named_paths:
        if path and path.startswith(UNSUPPORTED_SCHEMES):
            raise UnsupportedStorageError(
                f"{what} {path} cannot work: TensorFlow 2.16 and TFX have no s3:// or minio:// "
                "filesystem, so the components could not read or write it; use a gs:// path "
                "or a directory every pod mounts")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the KFP API is and how to authenticate: kfp.Client's own options."""
    host: str
    namespace: str | None = None  # multi-user Kubeflow: the profile's namespace
    existing_token: str | None = None
    cookies: str | None = None
    sa_token_path: str | None = None
    ui_host: str | None = None  # when the UI is not served at `host`

    def link(self, page: str) -> str:
        return f"{(self.ui_host or self.host).rstrip('/')}/#/{page}"


@dataclasses.dataclass(frozen=True)
class Package:
    """A compiled pipeline file, with the name and runtime parameters it declares."""
    path: str
    name: str
    parameter_types: Mapping[str, str]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    has_resolvers: bool = False  # compiled with --backend vertex: open-source KFP cannot run it

    @classmethod
    def read(cls, path: str) -> Package:
        if not path.endswith((".yaml", ".yml")):
            raise KfpError(f"{path!r} is not a compiled pipeline (a .yaml from "
                           "`nmt kubeflow compile`)")
        try:
            with open(path, encoding="utf-8") as f:
                spec = yaml.safe_load(f)
            parameters = spec["root"].get("inputDefinitions", {}).get("parameters", {})
            return cls(path, spec["pipelineInfo"]["name"],
                       {name: p["parameterType"] for name, p in parameters.items()},
                       {name: p["defaultValue"] for name, p in parameters.items()
                        if "defaultValue" in p},
                       any("resolver" in executor for executor in
                           spec.get("deploymentSpec", {}).get("executors", {}).values()))
        except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as err:
            raise KfpError(f"cannot read the compiled pipeline {path!r}: {err}") from None

    def digest(self) -> str:
        with open(self.path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Started:
    """A run or recurring run, and where it came from."""
    id: str
    link: str
    pipeline_id: str
    version_id: str


def kfp_cron(expression: str) -> str:
    """KFP schedules with 6-field cron (seconds first); users write the usual 5 fields.

    "0 3 * * *" -> "0 0 3 * * *"; 6 fields and descriptors ("@daily") pass through.
    """
    fields = expression.split()
    if expression.startswith("@") or len(fields) == 6:
        return expression
    if len(fields) != 5:
        raise KfpError(f"--cron expects 5 fields (minute hour day month weekday), e.g. "
                       f"\"0 3 * * *\", got {expression!r}")
    return " ".join(["0", *fields])


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parameter_values(package: Package, assignments: Sequence[str]) -> dict[str, Any]:
    """NAME=VALUE strings typed as the pipeline declares them (KFP rejects "5" for an int).

    A parameter whose compiled default is a JSON object (train_args, trainer_config) takes a
    JSON object that is merged over that default: trainer_config='{"train_minutes": 60}' keeps
    the compiled checkpoint_root and code_version instead of dropping them. A trainer_config
    must be valid Trainer settings, and may not switch the profile away from the one whose
    BLEU threshold the Evaluator was compiled with.
    """
    values = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        if not sep:
            raise KfpError(f"--param expects NAME=VALUE, got {assignment!r}")
        if name not in package.parameter_types:
            raise KfpError(f"pipeline {package.name} has no runtime parameter {name!r}; it has: "
                           f"{', '.join(sorted(package.parameter_types)) or 'none'}")
        ptype = package.parameter_types[name]
        try:
            values[name] = _PARAMETER_TYPES[ptype](text)
        except ValueError:
            raise KfpError(f"--param {name} is a {ptype}, got {text!r}") from None
        default = _json_object(str(package.defaults.get(name, "")))
        if default is not None:
            override = _json_object(text)
            if override is None:
                raise KfpError(f"--param {name} expects a JSON object, e.g. "
                               f"{json.dumps(dict(list(default.items())[:1]))}, got {text!r}")
            values[name] = json.dumps({**default, **override}, sort_keys=True)
    if "trainer_config" in values:  # refused now, not an hour into the run
        try:
            TrainerSettings.from_config(json.loads(values["trainer_config"]))
        except SettingsError as err:
            raise KfpError(f"--param trainer_config: {err}") from None
    return values


def submit(endpoint: Endpoint, package: Package, experiment: str, params: Mapping[str, Any],
           run_name: str | None = None, pipeline_root: str | None = None) -> Started:
    """Uploads the pipeline (or a new version of it) and starts one run."""
    client, pipeline_id, version_id, experiment_id = _prepare(endpoint, package, experiment)
    with _kfp_call(endpoint, "the run"):
        run = client.run_pipeline(
            experiment_id, run_name or default_run_name(package),
            params=dict(params), pipeline_id=pipeline_id, version_id=version_id,
            pipeline_root=pipeline_root)
    return Started(run.run_id, endpoint.link(f"runs/details/{run.run_id}"), pipeline_id,
                   version_id)


def schedule(endpoint: Endpoint, package: Package, experiment: str, params: Mapping[str, Any],
             cron: str, job_name: str | None = None,
             pipeline_root: str | None = None) -> Started:
    """Uploads the pipeline (or a new version of it) and creates a recurring run.

    One run at a time, and no catch-up: after downtime only the latest missed run starts.
    """
    cron_expression = kfp_cron(cron)
    client, pipeline_id, version_id, experiment_id = _prepare(endpoint, package, experiment)
    with _kfp_call(endpoint, "the recurring run"):
        job = client.create_recurring_run(
            experiment_id, job_name or f"{package.name} ({cron})",
            cron_expression=cron_expression, max_concurrency=1, no_catchup=True,
            params=dict(params), pipeline_id=pipeline_id, version_id=version_id,
            pipeline_root=pipeline_root)
    return Started(job.recurring_run_id,
                   endpoint.link(f"recurringrun/details/{job.recurring_run_id}"),
                   pipeline_id, version_id)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def default_run_name(package: Package) -> str:
    """'<pipeline name> <UTC time>', as KFP and Vertex AI runs are named unless told."""
    return f"{package.name} {_now():%Y-%m-%d %H:%M:%S}"


def _prepare(endpoint: Endpoint, package: Package,
             experiment: str) -> tuple[kfp.Client, str, str, str]:
    """Connects, uploads, and finds (or creates) the experiment."""
    client = _connect(endpoint)
    pipeline_id, version_id = _upload(client, endpoint, package)
    with _kfp_call(endpoint, f"the experiment {experiment!r}"):
        experiment_id = client.create_experiment(
            experiment, namespace=endpoint.namespace).experiment_id
    return client, pipeline_id, version_id, experiment_id


def _upload(client: kfp.Client, endpoint: Endpoint, package: Package) -> tuple[str, str]:
    """A new pipeline, or a new version of the pipeline of that name: (pipeline, version) ids."""
    with _kfp_call(endpoint, f"the lookup of pipeline {package.name!r}"):
        pipeline_id = client.get_pipeline_id(package.name)
    if pipeline_id is None:
        with _kfp_call(endpoint, f"the upload of pipeline {package.name!r}"):
            pipeline_id = client.upload_pipeline(package.path, package.name).pipeline_id
            versions = client.list_pipeline_versions(
                pipeline_id, page_size=1, sort_by="created_at desc").pipeline_versions
        if not versions:
            raise KfpError(f"{endpoint.host} created pipeline {pipeline_id} without a version")
        return pipeline_id, versions[0].pipeline_version_id
    version_name = f"{package.name}-{_now():%Y%m%d-%H%M%S}-{package.digest()[:8]}"
    with _kfp_call(endpoint, f"the upload of a new version of pipeline {package.name!r}"):
        version = client.upload_pipeline_version(package.path, version_name,
                                                  pipeline_id=pipeline_id)
    return pipeline_id, version.pipeline_version_id


class _HeldBack(logging.Filter):
    """What kfp.Client and urllib3 log on every retry: a traceback per failed health check
    (the last refusal is kept for our message) and a warning per reconnection."""

    def __init__(self) -> None:
        super().__init__()
        self.last_refusal: kfp_server_api.ApiException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], kfp_server_api.ApiException):
            self.last_refusal = record.exc_info[1]
            return False
        return not record.name.startswith("urllib3")


def _connect(endpoint: Endpoint) -> kfp.Client:
    credentials = (ServiceAccountTokenVolumeCredentials(endpoint.sa_token_path)
                   if endpoint.sa_token_path else None)
    with _kfp_call(endpoint, "the health check"):
        return kfp.Client(host=endpoint.host, namespace=endpoint.namespace or "kubeflow",
                          existing_token=endpoint.existing_token, cookies=endpoint.cookies,
                          credentials=credentials, ui_host=endpoint.ui_host)


@contextlib.contextmanager
def _kfp_call(endpoint: Endpoint, what: str) -> Iterator[None]:
    """One line per failure: what was asked, and what the endpoint or the network said.

    kfp.Client prints links (ours replace them), warns about its version, and it and urllib3
    log every retry; all of that is held back here so the user reads the outcome once.
    """
    held_back = _HeldBack()
    # kfp.Client logs with the root logger; urllib3's retries come from its connection pool.
    loggers = (logging.getLogger(), logging.getLogger("urllib3.connectionpool"))
    for logger in loggers:
        logger.addFilter(held_back)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    except kfp_server_api.ApiException as err:
        raise KfpError(f"{endpoint.host} refused {what}: {_describe(err)}") from None
    except urllib3.exceptions.HTTPError as err:
        reason = getattr(err, "reason", None) or err  # MaxRetryError: the last attempt's error
        raise KfpError(f"cannot reach the KFP API at {endpoint.host} ({what}): {reason}") from None
    except TimeoutError:  # kfp.Client gave up on its health check
        raise KfpError(f"{endpoint.host} refused {what} 5 times: "
                       f"{_describe(held_back.last_refusal)}") from None
    except ValueError as err:  # kfp.Client's own checks, e.g. two pipelines of that name
        raise KfpError(f"{what}: {err}") from None
    finally:
        for logger in loggers:
            logger.removeFilter(held_back)


def _describe(err: kfp_server_api.ApiException | None) -> str:
    """HTTP status and the server's message, on one line."""
    if err is None:
        return "no answer"
    message = err.body.decode(errors="replace") if isinstance(err.body, bytes) else err.body
    try:
        body = json.loads(message or "")
        message = body.get("message") or body.get("error") or message
    except (ValueError, AttributeError):
        pass
    status = f"HTTP {err.status} {err.reason}" if err.status else str(err.reason)
    return " ".join(f"{status}: {message}".split()) if message else status
