"""Kubeflow Pipelines: the compiled KFP v2 spec, and submit/schedule against a fake KFP API.

The spec is read back with the KFP SDK's own PipelineSpec proto. The fake API is a small HTTP
server on 127.0.0.1 that answers the v2beta1 REST calls kfp.Client makes and records them, so
the real kfp.Client (and its HTTP library) is what talks to it.
"""
from __future__ import annotations

import argparse
import dataclasses
import email.parser
import email.policy
import json
import os
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from components import eval_batches, evaluator_executor
from conftest import REPO
from helpers import send_json
from runners import kfp_client
from runners import kubeflow_runner
from pipeline.config import PipelineConfig
from cli import errors, kubeflow
from trainer_module.settings import SettingsError, TrainerSettings

IMAGE = "registry.example/nmt-fra-eng:test"
PIPELINE_ROOT = "gs://nmt-bucket/runs"
DATA = "gs://nmt-bucket/fra-eng/fra.txt"
COMPILE_FLAGS = ("--image", IMAGE, "--pipeline-root", PIPELINE_ROOT, "--data", DATA,
                 "--beam-arg=--runner=DataflowRunner", "--beam-arg=--project=nmt-project",
                 "--trainer-gpus", "2", "--trainer-gpu-type", "NVIDIA_TESLA_T4",
                 "--trainer-cpu", "8", "--trainer-memory", "32G")
# Each of these runs after the one before it.
CHAIN = ("FraTxtExampleGen", "StatisticsGen", "StrictExampleValidator", "Transform", "Trainer",
         "Evaluator", "AtomicPusher")
API = "/apis/v2beta1"


def nmt_kubeflow(*args: str) -> int:
    """`nmt kubeflow ...` in this process, through the same parser the nmt CLI adds."""
    parser = argparse.ArgumentParser(prog="nmt")
    kubeflow.add_parser(parser.add_subparsers(dest="command", required=True))
    parsed = parser.parse_args(["kubeflow", *args])
    return errors.run_handler(parsed)


def read_spec(path: str) -> pipeline_spec_pb2.PipelineSpec:
    with open(path, encoding="utf-8") as f:
        return json_format.ParseDict(yaml.safe_load(f), pipeline_spec_pb2.PipelineSpec())


def executors(spec: pipeline_spec_pb2.PipelineSpec) -> dict[str, Any]:
    deployment = json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec),
                                       pipeline_spec_pb2.PipelineDeploymentConfig())
    return dict(deployment.executors)


def executor_label(spec: pipeline_spec_pb2.PipelineSpec, task: str) -> str:
    return spec.components[spec.root.dag.tasks[task].component_ref.name].executor_label


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("kfp") / "pipeline.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--output", path) == 0
    return path


@pytest.fixture(scope="module")
def spec(compiled) -> pipeline_spec_pb2.PipelineSpec:
    return read_spec(compiled)


def test_every_component_is_a_task_in_dependency_order(spec):
    config = PipelineConfig(data_path=DATA, pipeline_root=PIPELINE_ROOT,
                            compare_with_latest_blessed=False)  # --backend kfp, the default
    pipeline = kubeflow_runner.build(config, kubeflow_runner.runtime_parameters(config))
    assert pipeline.metadata_connection_config is None  # KFP provides ML Metadata
    position = {component.id: i for i, component in enumerate(pipeline.components)}

    def component_of(task: str) -> str:  # a Resolver compiles to "<id>-<what>-resolver" tasks
        return next(id_ for id_ in position if task == id_ or task.startswith(id_ + "-"))

    tasks = spec.root.dag.tasks
    assert sorted({component_of(task) for task in tasks}) == sorted(position)
    for name, task in tasks.items():
        for upstream in task.dependent_tasks:
            assert position[component_of(upstream)] < position[component_of(name)], (upstream, name)
    for upstream, downstream in zip(CHAIN, CHAIN[1:]):
        assert upstream in tasks[downstream].dependent_tasks, (upstream, downstream)


def test_every_container_runs_the_image_with_the_beam_args(spec):
    containers = {label: e.container for label, e in executors(spec).items()
                  if e.HasField("container")}
    assert {executor_label(spec, task) for task in CHAIN} <= set(containers)
    for label, container in containers.items():
        assert container.image == IMAGE, label
        assert container.command == ["python", "-m", "runners.kubeflow_task"], label
    transform_args = list(containers[executor_label(spec, "Transform")].args)
    assert "--runner=DataflowRunner" in transform_args and "--project=nmt-project" in transform_args
    assert "--direct_running_mode=in_memory" not in transform_args  # --beam-arg replaces defaults


BEAM_COMPONENTS = ("FraTxtExampleGen", "StatisticsGen", "Transform", "Evaluator")


def test_only_the_trainer_asks_for_gpus_and_limits(spec):
    with_resources = {label for label, e in executors(spec).items()
                      if e.container.HasField("resources")}
    assert with_resources == {executor_label(spec, task) for task in ("Trainer", *BEAM_COMPONENTS)}
    with_gpus = {label for label, e in executors(spec).items()
                 if e.container.resources.accelerator.count}
    assert with_gpus == {executor_label(spec, "Trainer")}
    resources = executors(spec)[executor_label(spec, "Trainer")].container.resources
    # New KFP backends read the resource_* strings, older ones the numbers.
    assert (resources.accelerator.resource_type, resources.accelerator.resource_count) == (
        "NVIDIA_TESLA_T4", "2")
    assert (resources.accelerator.type, resources.accelerator.count) == ("NVIDIA_TESLA_T4", 2)
    assert (resources.resource_cpu_limit, resources.cpu_limit) == ("8000m", 8.0)
    assert (resources.resource_memory_limit, resources.memory_limit) == ("32000000000", 32.0)


def test_beam_components_request_cpu_and_memory_by_default(spec):
    for task in BEAM_COMPONENTS:
        resources = executors(spec)[executor_label(spec, task)].container.resources
        assert (resources.resource_cpu_request, resources.cpu_request) == ("2000m", 2.0), task
        assert resources.resource_memory_request == str(8 * 2**30), task
        assert not (resources.resource_cpu_limit or resources.resource_memory_limit), task


def test_beam_resources_are_flags_and_limits_on_vertex(tmp_path):
    path = str(tmp_path / "vertex.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", "vertex", "--beam-cpu", "4",
                        "--beam-memory", "16Gi", "--output", path) == 0
    vertex = read_spec(path)
    for task in BEAM_COMPONENTS:  # Vertex AI sizes a task's machine by its limits
        resources = executors(vertex)[executor_label(vertex, task)].container.resources
        assert (resources.resource_cpu_limit, resources.resource_memory_limit) == (
            "4000m", str(16 * 2**30)), task


def test_flink_tasks_run_beams_flinkrunner_on_the_cluster_with_the_images_job_server(tmp_path,
                                                                                  capsys):
    from engines import flink

    path = str(tmp_path / "flink.yaml")
    flags = [f for f in COMPILE_FLAGS if not f.startswith("--beam-arg")]
    assert nmt_kubeflow("compile", *flags, "--beam-runner", "flink", "--flink-master",
                        "flink-jobmanager:8081", "--beam-arg=--parallelism=8",
                        "--output", path) == 0
    flink_spec = read_spec(path)
    for task in BEAM_COMPONENTS:
        args = list(executors(flink_spec)[executor_label(flink_spec, task)].container.args)
        assert "--runner=FlinkRunner" in args and "--parallelism=8" in args, task
        assert "--flink_master=flink-jobmanager:8081" in args, task
        assert f"--flink_job_server_jar={flink.IMAGE_LAUNCHER_JAR}" in args, task
        assert "--environment_config=localhost:50000" in args, task
    # The Dockerfile builds that jar and gives its JVM Flink's Java 17 flags.
    with open(os.path.join(REPO, "Dockerfile"), encoding="utf-8") as f:
        dockerfile = f.read()
    assert "flink.IMAGE_LAUNCHER_JAR" in dockerfile
    assert f'ENV JDK_JAVA_OPTIONS="{flink.java_options()}"' in dockerfile
    assert nmt_kubeflow("compile", *flags, "--beam-runner", "flink", "--output", path) == 2
    assert "--beam-runner flink and --flink-master go together" in capsys.readouterr().err


def test_open_source_kfp_never_caches_example_gen(spec, compiled, tmp_path, capsys):
    """KFP's cache key cannot see a new fra.txt (TFX's fingerprinting driver is Vertex-only)."""
    tasks = spec.root.dag.tasks
    assert not tasks["FraTxtExampleGen"].caching_options.enable_cache
    assert all(tasks[t].caching_options.enable_cache for t in tasks if t != "FraTxtExampleGen")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--output", str(tmp_path / "p.yaml")) == 0
    out = capsys.readouterr().out
    assert ("kfp: caching: FraTxtExampleGen runs every time (open-source KFP cannot see that "
            "fra.txt changed), so AtomicPusher, Evaluator, StatisticsGen, StrictExampleValidator,"
            " Trainer, Transform run again on its new output; cached when unchanged: "
            "ImportSchemaGen") in out
    path = str(tmp_path / "vertex.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", "vertex", "--output", path) == 0
    assert "FraTxtExampleGen's cache key includes the fingerprint" in capsys.readouterr().out
    vertex = read_spec(path)
    assert vertex.root.dag.tasks["FraTxtExampleGen"].caching_options.enable_cache
    example_gen = executors(vertex)[executor_label(vertex, "FraTxtExampleGen")].container
    assert example_gen.lifecycle.pre_cache_check.command[-1] == (
        "tfx.orchestration.kubeflow.v2.file_based_example_gen.driver")


def test_warm_start_compiles_a_served_model_task_that_is_never_cached(tmp_path, capsys):
    """`--warm-start`: the Trainer's base_model comes from ServedModel, which takes the newest
    served version when it runs (version 0), so neither backend may cache it; Transform is
    told where to find the served vocabulary (issue #65 item 5)."""
    for backend in ("kfp", "vertex"):
        path = str(tmp_path / f"{backend}.yaml")
        assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", backend, "--warm-start",
                            "--output", path) == 0
        out = capsys.readouterr().out
        assert "ServedModel and Transform run every time too (a warm start takes the model " \
               "served when they run, its weights and its vocabulary), so AtomicPusher, " \
               "Evaluator, Trainer run again" in out
        warm = read_spec(path)
        tasks = warm.root.dag.tasks
        assert not tasks["ServedModel"].caching_options.enable_cache
        assert not tasks["Transform"].caching_options.enable_cache
        assert tasks["StatisticsGen"].caching_options.enable_cache
        assert "ServedModel" in tasks["Trainer"].dependent_tasks
        assert tasks["Trainer"].inputs.artifacts["base_model"].task_output_artifact \
            .producer_task == "ServedModel"
        parameters = tasks["ServedModel"].inputs.parameters
        assert parameters["version"].runtime_value.constant.number_value == 0
        transform = json.loads(tasks["Transform"].inputs.parameters[
            "custom_config"].runtime_value.constant.string_value)
        assert transform["served_vocabulary"] == f"{PIPELINE_ROOT}/serving/nmt-fra-eng"


def test_dataflow_workers_get_the_image(spec):
    for task in BEAM_COMPONENTS:
        args = executors(spec)[executor_label(spec, task)].container.args
        assert f"--sdk_container_image={IMAGE}" in args, task
    assert kubeflow_runner.with_sdk_container_image(
        ["--runner=DataflowRunner", "--sdk_container_image=other:1"], IMAGE) == (
        "--runner=DataflowRunner", "--sdk_container_image=other:1")
    assert kubeflow_runner.with_sdk_container_image(["--direct_num_workers=1"], IMAGE) == (
        "--direct_num_workers=1",)


@pytest.mark.parametrize("flag, path", [("--pipeline-root", "minio://mlpipeline/v2/artifacts"),
                                        ("--data", "s3://bucket/fra.txt")])
def test_object_store_paths_tensorflow_cannot_use_are_refused(flag, path, tmp_path, capsys):
    flags = dict(zip(COMPILE_FLAGS[::2], COMPILE_FLAGS[1::2]))
    flags[flag] = path
    args = [part for item in flags.items() for part in item if part.startswith("-") or item[1]]
    assert nmt_kubeflow("compile", *args, "--output", str(tmp_path / "p.yaml")) == 2
    assert capsys.readouterr().err == (
        f"nmt: error: {flag} {path} cannot work: TensorFlow 2.16 and TFX have no s3:// or "
        "minio:// filesystem, so the components could not read or write it; use a gs:// path "
        "or a directory every pod mounts\n")
    assert not os.path.exists(tmp_path / "p.yaml")


def test_vertex_trainer_workers_run_a_custom_job_with_worker_pools(tmp_path):
    """--trainer-workers: TFX's Google Cloud Trainer extension submits a Vertex AI custom job;
    pool 0 is the chief, pool 1 the other workers, each on the asked machine and GPUs."""
    path = str(tmp_path / "vertex.yaml")
    flags = [f for f in COMPILE_FLAGS if f not in ("--trainer-cpu", "8", "--trainer-memory",
                                                   "32G")]
    assert nmt_kubeflow("compile", *flags, "--backend", "vertex", "--trainer-workers", "3",
                        "--trainer-machine-type", "n1-highmem-16", "--project", "nmt-project",
                        "--region", "europe-west4", "--output", path) == 0
    vertex = read_spec(path)
    trainer = executors(vertex)[executor_label(vertex, "Trainer")].container
    assert trainer.args[1] == ("tfx.extensions.google_cloud_ai_platform.trainer.executor."
                               "GenericExecutor")
    assert not trainer.HasField("resources")  # the machines are the worker pools'
    config = json.loads(vertex.root.input_definitions.parameters[
        "trainer_config"].default_value.string_value)
    machine = {"machine_type": "n1-highmem-16", "accelerator_type": "NVIDIA_TESLA_T4",
               "accelerator_count": 2}
    assert config["ai_platform_training_args"] == {"project": "nmt-project", "worker_pool_specs": [
        {"machine_spec": machine, "replica_count": 1, "container_spec": {"image_uri": IMAGE}},
        {"machine_spec": machine, "replica_count": 2, "container_spec": {"image_uri": IMAGE}}]}
    assert (config["ai_platform_enable_vertex"], config["ai_platform_vertex_region"]) == (
        True, "europe-west4")
    assert config["profile"] == "cpu"
    assert config["checkpoint_root"] == PIPELINE_ROOT + "/checkpoints"


def test_trainer_workers_need_vertex(tmp_path, capsys):
    output = ("--output", str(tmp_path / "p.yaml"))
    flags = [f for f in COMPILE_FLAGS if f not in ("--trainer-cpu", "8", "--trainer-memory",
                                                   "32G")]
    assert nmt_kubeflow("compile", *flags, "--trainer-workers", "2", *output) == 2
    assert capsys.readouterr().err == (
        "nmt: error: --trainer-workers needs --backend vertex: open-source KFP runs each task "
        "as one pod and has no multi-machine task\n")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", "vertex", "--trainer-workers",
                        "2", "--project", "p", *output) == 2
    assert "with --trainer-workers each machine is --trainer-machine-type" in (
        capsys.readouterr().err)


def test_open_source_kfp_gets_no_resolver_and_vertex_does(spec, tmp_path):
    assert not [task for task in spec.root.dag.tasks if "resolver" in task]
    evaluator_inputs = spec.root.dag.tasks["Evaluator"].inputs.artifacts
    assert "baseline_model" not in evaluator_inputs
    path = str(tmp_path / "vertex.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--backend", "vertex", "--output", path) == 0
    vertex = read_spec(path)
    assert [t for t in vertex.root.dag.tasks if t.startswith("latest_blessed_model_resolver")]
    assert "baseline_model" in vertex.root.dag.tasks["Evaluator"].inputs.artifacts


def test_the_evaluator_merges_its_input_into_large_batches_in_the_image_too(spec):
    """The image's Evaluator imports the module by this name (components/eval_batches.py)."""
    parameters = spec.root.dag.tasks["Evaluator"].inputs.parameters
    assert parameters["module_path"].runtime_value.constant.string_value == \
        eval_batches.__name__


def test_the_evaluators_task_runs_the_evaluator_without_grappler(spec):
    """The image's Evaluator runs the pipeline's executor (components/evaluator_executor.py),
    not TFX's own."""
    args = list(executors(spec)[executor_label(spec, "Evaluator")].container.args)
    assert args[args.index("--executor_class_path") + 1] == \
        f"{evaluator_executor.__name__}.{evaluator_executor.Executor.__name__}"


def test_trainer_steps_and_profile_are_runtime_parameters(spec):
    parameters = spec.root.input_definitions.parameters
    assert json.loads(parameters["train_args"].default_value.string_value) == {"num_steps": 0}
    trainer_config = json.loads(parameters["trainer_config"].default_value.string_value)
    assert trainer_config["profile"] == "cpu"
    assert trainer_config["checkpoint_root"] == PIPELINE_ROOT + "/checkpoints"
    trainer = spec.root.dag.tasks["Trainer"].inputs.parameters
    assert trainer["train_args"].component_input_parameter == "train_args"
    assert trainer["custom_config"].component_input_parameter == "trainer_config"


def test_data_root_is_a_runtime_parameter_defaulting_to_the_data_directory(spec):
    parameter = spec.root.input_definitions.parameters["data_root"]
    assert parameter.parameter_type == pipeline_spec_pb2.ParameterType.STRING
    assert parameter.default_value.string_value == "gs://nmt-bucket/fra-eng"
    assert parameter.is_optional
    example_gen = spec.root.dag.tasks["FraTxtExampleGen"].inputs.parameters
    assert example_gen["input_base"].component_input_parameter == "data_root"
    input_config = json.loads(example_gen["input_config"].runtime_value.constant.string_value)
    assert [split["pattern"] for split in input_config["splits"]] == ["fra.txt"]


def test_pipeline_root_is_the_specs_overridable_default(spec):
    # A run's runtime_config.pipeline_root replaces it (see the submit test).
    assert spec.default_pipeline_root == PIPELINE_ROOT


def test_resources_for_a_missing_component_are_a_clear_error():
    config = PipelineConfig(data_path=DATA, pipeline_root=PIPELINE_ROOT)
    pipeline = kubeflow_runner.build(config, {})
    with pytest.raises(kubeflow_runner.ComponentNotFoundError, match="no component 'Trainr'"):
        kubeflow_runner.set_resources(pipeline, "Trainr", kubeflow_runner.Resources(gpus=1))


def test_compile_flag_errors_are_one_line(tmp_path, capsys):
    assert nmt_kubeflow("compile", "--image", IMAGE, "--output", str(tmp_path / "p.yaml")) == 2
    assert capsys.readouterr().err == (
        "nmt: error: compiling needs --data, --pipeline-root\n")
    with pytest.raises(SystemExit):
        nmt_kubeflow("compile", *COMPILE_FLAGS, "--output", str(tmp_path / "p.json"))
    assert "use a .yaml name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        nmt_kubeflow("compile", *COMPILE_FLAGS, "--trainer-memory", "32GB")
    assert "expected a size, e.g. 32G or 30Gi, got '32GB'" in capsys.readouterr().err


def test_cron_takes_five_fields_and_gives_kfp_six():
    assert kfp_client.kfp_cron("0 3 * * *") == "0 0 3 * * *"
    assert kfp_client.kfp_cron("30 0 3 * * 1-5") == "30 0 3 * * 1-5"
    assert kfp_client.kfp_cron("@daily") == "@daily"
    with pytest.raises(kfp_client.KfpError, match="5 fields"):
        kfp_client.kfp_cron("3 * * *")


def test_a_partial_trainer_config_is_merged_over_the_compiled_one(compiled):
    package = kfp_client.Package.read(compiled)
    [value] = kfp_client.parameter_values(
        package, ['trainer_config={"train_minutes": 60}']).values()
    merged = json.loads(value)
    assert (merged["profile"], merged["train_minutes"]) == ("cpu", 60)
    assert merged["checkpoint_root"] == PIPELINE_ROOT + "/checkpoints" and merged["code_version"]
    with pytest.raises(kfp_client.KfpError,
                       match=r"--param trainer_config expects a JSON object, e\.g\. "):
        kfp_client.parameter_values(package, ["trainer_config=base"])


def test_a_runtime_profile_cannot_leave_the_gate_judging_by_another(compiled):
    """The Evaluator's BLEU threshold is compiled from the profile: switching the Trainer to
    another profile at run time is refused in one sentence, unless the run also says which
    threshold to bless by. The Trainer itself refuses the same settings (a run started from
    the KFP UI does not pass through `nmt`)."""
    package = kfp_client.Package.read(compiled)
    with pytest.raises(kfp_client.KfpError) as refused:
        kfp_client.parameter_values(package, ['trainer_config={"profile": "base"}'])
    assert str(refused.value) == (
        "--param trainer_config: trainer_config asks for profile 'base', but this pipeline's "
        "Evaluator was built to bless by profile 'cpu''s threshold (BLEU >= 10); compile it "
        "again with --profile base (or give min_bleu too)")
    [value] = kfp_client.parameter_values(
        package, ['trainer_config={"profile": "base", "min_bleu": 10}']).values()
    assert TrainerSettings.from_config(json.loads(value)).bleu_threshold == 10
    default = json.loads(package.defaults["trainer_config"])
    with pytest.raises(SettingsError, match="compile it again with --profile base"):
        TrainerSettings.from_config({**default, "profile": "base"})


def test_compile_takes_the_recipe_flags_of_nmt_run(tmp_path):
    path = str(tmp_path / "pipeline.yaml")
    assert nmt_kubeflow("compile", *COMPILE_FLAGS, "--output", path, "--profile", "cpu_2h",
                        "--train-minutes", "45", "--hparam", "dropout_rate=0.2",
                        "--precision", "float32", "--min-bleu", "12.5") == 0
    package = kfp_client.Package.read(path)
    settings = TrainerSettings.from_config(json.loads(package.defaults["trainer_config"]))
    assert (settings.profile, settings.train_minutes, settings.hparams, settings.precision,
            settings.bleu_threshold) == ("cpu_2h", 45.0, {"dropout_rate": 0.2}, "float32", 12.5)
    assert "12.5" in json.dumps(json_format.MessageToDict(read_spec(path)))  # the Evaluator's


def test_parameters_are_typed_as_the_pipeline_declares():
    package = kfp_client.Package("p.yaml", "nmt-fra-eng", {
        "data_root": "STRING", "train_steps": "NUMBER_INTEGER", "dropout": "NUMBER_DOUBLE"})
    assert kfp_client.parameter_values(
        package, ["data_root=gs://b/x=y", "train_steps=500", "dropout=0.1"]) == {
        "data_root": "gs://b/x=y", "train_steps": 500, "dropout": 0.1}
    with pytest.raises(kfp_client.KfpError, match="no runtime parameter 'steps'; it has: "):
        kfp_client.parameter_values(package, ["steps=5"])
    with pytest.raises(kfp_client.KfpError, match="train_steps is a NUMBER_INTEGER, got 'many'"):
        kfp_client.parameter_values(package, ["train_steps=many"])


# --- a fake KFP API -----------------------------------------------------------------------


@dataclasses.dataclass
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    body: bytes
    content_type: str

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def files(self) -> dict[str, bytes]:
        """multipart/form-data parts by field name."""
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {self.content_type}\r\n\r\n".encode() + self.body)
        return {part.get_param("name", header="content-disposition"): part.get_content()
                for part in message.iter_parts()}


class FakeKfpApi(ThreadingHTTPServer):
    """The v2beta1 endpoints kfp.Client uses for upload, experiments, runs and recurring runs."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_port}"
        self.requests: list[Request] = []
        self.pipelines: dict[str, str] = {}  # id -> name
        self.versions: dict[str, list[str]] = {}  # pipeline id -> version ids, oldest first
        self.experiments: dict[str, str] = {}  # id -> name
        self.rejections: dict[tuple[str, str], tuple[int, dict]] = {}

    def calls(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if (r.method, r.path) == (method, API + path)]

    def one(self, method: str, path: str) -> Request:
        calls = self.calls(method, path)
        assert len(calls) == 1, (method, path, [(r.method, r.path) for r in self.requests])
        return calls[0]

    def add_pipeline(self, name: str) -> str:
        pipeline_id = f"pipeline-{len(self.pipelines) + 1}"
        self.pipelines[pipeline_id] = name
        self.versions[pipeline_id] = []
        self.add_version(pipeline_id)
        return pipeline_id

    def add_version(self, pipeline_id: str) -> str:
        version_id = f"version-{sum(map(len, self.versions.values())) + 1}"
        self.versions[pipeline_id].append(version_id)
        return version_id

    def add_experiment(self, name: str) -> str:
        experiment_id = f"experiment-{len(self.experiments) + 1}"
        self.experiments[experiment_id] = name
        return experiment_id

    def respond(self, request: Request) -> tuple[int, dict]:
        if (request.method, request.path) in self.rejections:
            return self.rejections[request.method, request.path]
        route = request.method, request.path.removeprefix(API)
        if route == ("GET", "/healthz"):
            return 200, {"multi_user": False}
        if route == ("GET", "/pipelines"):
            return 200, {"pipelines": [{"pipeline_id": i, "display_name": n}
                                       for i, n in self.pipelines.items()
                                       if n == _filtered_name(request)]}
        if route == ("POST", "/pipelines/upload"):
            pipeline_id = self.add_pipeline(request.query["name"][0])
            return 200, {"pipeline_id": pipeline_id, "display_name": request.query["name"][0]}
        if request.method == "GET" and request.path.endswith("/versions"):
            pipeline_id = request.path.split("/")[-2]
            return 200, {"pipeline_versions": [
                {"pipeline_id": pipeline_id, "pipeline_version_id": version}
                for version in reversed(self.versions[pipeline_id])]}
        if route == ("POST", "/pipelines/upload_version"):
            pipeline_id = request.query["pipelineid"][0]
            return 200, {"pipeline_id": pipeline_id,
                         "pipeline_version_id": self.add_version(pipeline_id)}
        if route == ("GET", "/experiments"):
            return 200, {"experiments": [{"experiment_id": i, "display_name": n}
                                         for i, n in self.experiments.items()
                                         if n == _filtered_name(request)]}
        if route == ("POST", "/experiments"):
            return 200, {"experiment_id": self.add_experiment(request.json["display_name"]),
                         **request.json}
        if route == ("POST", "/runs"):
            return 200, {"run_id": f"run-{len(self.calls(*route))}", **request.json}
        if route == ("POST", "/recurringruns"):
            return 200, {"recurring_run_id": f"recurring-run-{len(self.calls(*route))}",
                         **request.json}
        return 404, {"error": "not found", "message": f"no route {route}", "code": 5}


def _filtered_name(request: Request) -> str:
    """The display name in kfp.Client's `filter` query (an EQUALS predicate)."""
    [predicate] = json.loads(request.query["filter"][0])["predicates"]
    return predicate["stringValue"]


class _Handler(BaseHTTPRequestHandler):
    server: FakeKfpApi

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def _answer(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        request = Request(self.command, url.path, urllib.parse.parse_qs(url.query),
                          self.rfile.read(int(self.headers.get("Content-Length", 0))),
                          self.headers.get("Content-Type", ""))
        self.server.requests.append(request)
        status, payload = self.server.respond(request)
        send_json(self, status, payload)

    def log_message(self, *args) -> None:  # keep the test output readable
        pass


@pytest.fixture
def kfp_api():
    server = FakeKfpApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_submit_uploads_the_pipeline_and_starts_a_run(kfp_api, compiled, capsys):
    code = nmt_kubeflow("submit", "--package", compiled, "--host", kfp_api.url,
                        "--experiment", "nightly", "--param", "data_root=gs://nmt-bucket/2025-06",
                        "--pipeline-root", "gs://other-bucket/runs")
    out, err = capsys.readouterr()
    assert code == 0, err
    upload = kfp_api.one("POST", "/pipelines/upload")
    assert upload.query["name"] == ["nmt-fra-eng"]
    assert upload.files["uploadfile"] == read_bytes(compiled)
    assert kfp_api.one("POST", "/experiments").json["display_name"] == "nightly"
    run = kfp_api.one("POST", "/runs").json
    assert run["experiment_id"] == "experiment-1"
    assert run["pipeline_version_reference"] == {"pipeline_id": "pipeline-1",
                                                 "pipeline_version_id": "version-1"}
    assert run["runtime_config"] == {"parameters": {"data_root": "gs://nmt-bucket/2025-06"},
                                     "pipeline_root": "gs://other-bucket/runs"}
    assert f"Run run-1 in experiment nightly: {kfp_api.url}/#/runs/details/run-1" in out


def test_submit_compiles_and_adds_a_version_to_an_existing_pipeline(kfp_api, capsys):
    kfp_api.add_pipeline("nmt-fra-eng")
    code = nmt_kubeflow("submit", *COMPILE_FLAGS, "--host", kfp_api.url)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not kfp_api.calls("POST", "/pipelines/upload")
    upload = kfp_api.one("POST", "/pipelines/upload_version")
    assert upload.query["pipelineid"] == ["pipeline-1"]
    uploaded = json_format.ParseDict(yaml.safe_load(upload.files["uploadfile"]),
                                     pipeline_spec_pb2.PipelineSpec())
    assert executors(uploaded)[executor_label(uploaded, "Trainer")].container.image == IMAGE
    run = kfp_api.one("POST", "/runs").json
    assert run["pipeline_version_reference"]["pipeline_version_id"] == "version-2"
    # No --param: the compiled defaults apply.
    assert run["runtime_config"] == {"parameters": {}, "pipeline_root": PIPELINE_ROOT}
    assert kfp_api.one("POST", "/experiments").json["display_name"] == "nmt-fra-eng"
    assert "version version-2" in out


def test_schedule_creates_a_recurring_run_with_kfp_six_field_cron(kfp_api, compiled, capsys):
    kfp_api.add_experiment("nightly")
    code = nmt_kubeflow("schedule", "--package", compiled, "--host", kfp_api.url,
                        "--experiment", "nightly", "--cron", "0 3 * * *",
                        "--param", "data_root=gs://nmt-bucket/latest")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not kfp_api.calls("POST", "/experiments")  # found by name
    job = kfp_api.one("POST", "/recurringruns").json
    assert job["trigger"] == {"cron_schedule": {"cron": "0 0 3 * * *"}}
    assert (job["mode"], job["max_concurrency"], job["no_catchup"]) == ("ENABLE", 1, True)
    assert job["experiment_id"] == "experiment-1"
    assert job["pipeline_version_reference"] == {"pipeline_id": "pipeline-1",
                                                 "pipeline_version_id": "version-1"}
    assert job["runtime_config"] == {"parameters": {"data_root": "gs://nmt-bucket/latest"}}
    assert kfp_api.one("POST", "/pipelines/upload").files["uploadfile"] == read_bytes(compiled)
    assert (f"recurring-run-1 in experiment nightly: "
            f"{kfp_api.url}/#/recurringrun/details/recurring-run-1") in out


def test_a_refused_request_is_one_line(kfp_api, compiled, capsys):
    kfp_api.rejections["POST", API + "/pipelines/upload"] = (
        400, {"error": "bad spec", "message": "Failed to upload: invalid pipeline spec", "code": 3})
    assert nmt_kubeflow("submit", "--package", compiled, "--host", kfp_api.url) == 1
    assert capsys.readouterr().err == (
        f"nmt: error: {kfp_api.url} refused the upload of pipeline 'nmt-fra-eng': "
        "HTTP 400 Bad Request: Failed to upload: invalid pipeline spec\n")
    assert not kfp_api.calls("POST", "/runs")


def test_a_refused_health_check_is_one_line_without_tracebacks(kfp_api, compiled, capsys,
                                                              caplog, monkeypatch):
    kfp_api.rejections["GET", API + "/healthz"] = (401, {"error": "no token", "code": 16})
    monkeypatch.setattr("kfp.client.client.time.sleep", lambda seconds: None)  # 5 retries
    assert nmt_kubeflow("submit", "--package", compiled, "--host", kfp_api.url) == 1
    assert capsys.readouterr().err == (
        f"nmt: error: {kfp_api.url} refused the health check 5 times: "
        "HTTP 401 Unauthorized: no token\n")
    assert not [record for record in caplog.records if record.exc_info]


def test_an_unreachable_endpoint_is_one_line(compiled, tmp_path):
    """A fresh process as a user runs it, with nmt's logging: one line, no traceback."""
    script = ("import sys; from runners import logs; from test_kubeflow import nmt_kubeflow; "
              "logs.configure(); sys.exit(nmt_kubeflow(*sys.argv[1:]))")
    result = subprocess.run(
        [sys.executable, "-c", script, "submit", "--package", compiled,
         "--host", "http://127.0.0.1:9"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "HOME": str(tmp_path), "TF_CPP_MIN_LOG_LEVEL": "3",
             "PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "tests")]),
             "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 1
    last_line = result.stderr.splitlines()[-1]
    assert last_line.startswith("nmt: error: cannot reach the KFP API at "
                                "http://127.0.0.1:9 (the health check): "), result.stderr
    assert last_line.endswith("Connection refused")
    assert "Traceback" not in result.stderr and "Retrying" not in result.stderr
