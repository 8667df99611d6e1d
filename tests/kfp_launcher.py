"""Runs a compiled KFP v2 PipelineSpec here, task by task, as Kubeflow Pipelines' backend would.

For each task of `root.dag.tasks`, as soon as the tasks it depends on are done (independent
ones at the same time, in threads; tests/kfp_dag.py says which and in what order), it does
what KFP's driver (kubeflow/pipelines backend/src/v2/driver: container.go, resolve.go, driver.go
provisionOutputs, cache.go) and launcher (backend/src/v2/component/launcher_v2.go) do:

- builds the `ExecutorInput`: parameters from constants, the run's values or the pipeline's
  defaults, and upstream output parameters; input artifacts are the upstream tasks' output
  artifacts, with the metadata their executors wrote; outputs are provisioned under
  `<pipeline root>/<pipeline name>/<run id>/<task>/<uuid>/<output>`, with the executor output
  file `output_metadata.json` in that task root, as KFP does for object-store roots;
- computes KFP's cache key (input artifact names, input parameters, output specs without URIs,
  command, args, image: tests/kfp_dag.py, shared with tests/kfp_store.py) and, for tasks
  compiled with `cachingOptions.enableCache`, reuses the outputs of an earlier execution with
  the same key instead of running;
- substitutes `{{$}}` (the ExecutorInput as JSON, parameter defaults added) and the
  `{{$.inputs...}}`/`{{$.outputs...}}` placeholders into the task's own `command` and `args`
  from the spec and runs them in a subprocess, with the container's `env`;
- merges the executor output file back into the output artifacts (URI, metadata) as
  `mergeRuntimeArtifacts` does, and reads output parameters.

`mode="vertex"` also does what Vertex AI Pipelines does and open-source KFP does not (its
backend has neither): it runs a container's `lifecycle.preCacheCheck` command (TFX's
ExampleGen driver: span, version and the input fingerprint) before the cache check, with the
same ExecutorInput, so the parameters it writes join the cache key and reach the executor
(TFX's run_executor reads that file first); and it answers `resolver` tasks'
`outputArtifactQueries` from the artifacts of earlier runs. In `kfp` mode a resolver task is
an error, as on a KFP cluster.

Simplified, and said so here: the pipeline root is a local directory and URIs are local
paths (on a cluster a gs:// or minio:// root is mounted or copied under /gcs/, /minio/...);
ML Metadata and KFP's cache database are one JSON file in the pipeline root (`_Store`); a
resolver query returns the newest matching artifact; container resources, the image itself
and Kubernetes are not involved (the command runs with this venv's `python` first on PATH);
output parameter files go under the task root, not /tmp/kfp/outputs; an `importer` task is
refused (this pipeline compiles none); conditions, loops and sub-DAGs are not supported.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import uuid
from typing import Any, Mapping

import yaml
from google.protobuf import json_format, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2 as pb

import kfp_dag

_STORE_FILE = "kfp_launcher_store.json"
_INPUT_ARTIFACT = re.compile(r"\{\{\$\.inputs\.artifacts\['([^']+)'\]\.metadata\['([^']+)'\]\}\}")


class LauncherError(RuntimeError):
    """A task failed or the spec uses something this launcher does not run."""


@dataclasses.dataclass
class TaskRun:
    """What happened to one task: executed, cached or resolved, and what it produced."""
    name: str
    state: str  # "executed", "cached" (KFP's cache) or "resolved" (a resolver task)
    fingerprint: str | None
    executor_input: pb.ExecutorInput | None
    outputs: dict[str, list[pb.RuntimeArtifact]]
    output_parameters: dict[str, Any]
    log: str = ""

    def artifact(self, output: str) -> pb.RuntimeArtifact:
        [artifact] = self.outputs[output]
        return artifact


def read_spec(path: str) -> pb.PipelineSpec:
    with open(path, encoding="utf-8") as f:
        return json_format.ParseDict(yaml.safe_load(f), pb.PipelineSpec())


class _Store:
    """KFP's cache database and the part of ML Metadata a resolver queries, as one JSON file:
    executions by cache key, and every output artifact with its type title and metadata."""

    def __init__(self, pipeline_root: str) -> None:
        self.path = os.path.join(pipeline_root, _STORE_FILE)
        self.lock = threading.Lock()  # tasks run in threads
        self.data: dict[str, Any] = {"artifacts": [], "cache": {}}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.data = json.load(f)

    def save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(self.data, f)

    def record(self, fingerprint: str | None, outputs: Mapping[str, list[pb.RuntimeArtifact]],
               parameters: Mapping[str, Any]) -> None:
        """Names each new artifact (as MLMD gives it an id) and remembers the execution."""
        with self.lock:
            self._record(fingerprint, outputs, parameters)

    def _record(self, fingerprint: str | None, outputs: Mapping[str, list[pb.RuntimeArtifact]],
                parameters: Mapping[str, Any]) -> None:
        for artifacts in outputs.values():
            for artifact in artifacts:
                artifact.name = f"local/artifacts/{len(self.data['artifacts']) + 1}"
                self.data["artifacts"].append(json_format.MessageToDict(artifact))
        if fingerprint:
            self.data["cache"][fingerprint] = {
                "outputs": {name: [json_format.MessageToDict(a) for a in artifacts]
                            for name, artifacts in outputs.items()},
                "parameters": dict(parameters)}
        self.save()

    def cached(self, fingerprint: str) -> tuple[dict[str, list[pb.RuntimeArtifact]],
                                                dict[str, Any]] | None:
        hit = self.data["cache"].get(fingerprint)
        if hit is None:
            return None
        return ({name: [json_format.ParseDict(a, pb.RuntimeArtifact()) for a in artifacts]
                 for name, artifacts in hit["outputs"].items()}, hit["parameters"])

    def query(self, expression: str) -> list[pb.RuntimeArtifact]:
        """The newest artifact matching a Vertex resolver filter, e.g. `schema_title="tfx.Model"
        AND state=LIVE AND metadata.blessed.number_value=1` (the forms TFX compiles)."""
        clauses = [clause.split("=", 1) for clause in expression.split(" AND ")]
        matches = [artifact for artifact in map(_Artifact, self.data["artifacts"])
                   if all(artifact.matches(key.strip(), value.strip()) for key, value in clauses)]
        return [json_format.ParseDict(matches[-1].data, pb.RuntimeArtifact())] if matches else []


class _Artifact:
    """One stored artifact, as a resolver filter sees it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def matches(self, key: str, value: str) -> bool:
        if key == "schema_title":
            return _schema_title(self.data["type"]) == json.loads(value)
        if key == "state":
            return value == "LIVE"  # artifacts of succeeded executions only are stored
        if key == "name":
            return self.data.get("name") == json.loads(value)
        match = re.fullmatch(r"metadata\.(\w+)\.(number_value|string_value)", key)
        if match is None:
            raise LauncherError(f"resolver filter clause {key}={value} is not supported")
        actual = self.data.get("metadata", {}).get(match[1])
        return actual is not None and actual == json.loads(value)


def _schema_title(artifact_type: Mapping[str, str]) -> str:
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    return yaml.safe_load(artifact_type["instanceSchema"])["title"]


def _with_upstream(tasks: Mapping[str, pb.PipelineTaskSpec], name: str) -> set[str]:
    if name not in tasks:
        raise LauncherError(f"the pipeline has no task {name!r}")
    return {name}.union(*(_with_upstream(tasks, up) for up in kfp_dag.upstream(tasks[name])))


def _value(python_value: Any) -> struct_pb2.Value:
    return json_format.ParseDict(python_value, struct_pb2.Value())


class LocalPipelineRun:
    """One run of a compiled pipeline: `run()` executes it and returns every task's TaskRun."""

    def __init__(self, spec: pb.PipelineSpec, pipeline_root: str,
                 parameters: Mapping[str, Any] | None = None, mode: str = "kfp",
                 env: Mapping[str, str] | None = None) -> None:
        if mode not in ("kfp", "vertex"):
            raise ValueError(f"mode is kfp or vertex, got {mode!r}")
        self.spec = spec
        self.pipeline_root = pipeline_root
        self.mode = mode
        self.env = dict(env or {})
        self.run_id = uuid.uuid4().hex[:12]
        self.store = _Store(pipeline_root)
        self.deployment = json_format.ParseDict(
            json_format.MessageToDict(spec.deployment_spec), pb.PipelineDeploymentConfig())
        self.parameters = self._root_parameters(parameters or {})
        self.tasks: dict[str, TaskRun] = {}

    def _root_parameters(self, overrides: Mapping[str, Any]) -> dict[str, struct_pb2.Value]:
        """The run's values over the pipeline's defaults (KFP's root DAG driver)."""
        definitions = self.spec.root.input_definitions.parameters
        unknown = set(overrides) - set(definitions)
        if unknown:
            raise LauncherError(f"the pipeline has no parameters {sorted(unknown)}")
        values = {name: d.default_value for name, d in definitions.items()
                  if d.HasField("default_value")}
        values.update({name: _value(value) for name, value in overrides.items()})
        return values

    def run(self, only: str | None = None) -> dict[str, TaskRun]:
        """Runs every task (or only task `only` and what it depends on) as KFP schedules them:
        each as soon as the tasks it depends on are done, independent ones at the same time."""
        tasks = self.spec.root.dag.tasks
        wanted = set(tasks) if only is None else _with_upstream(tasks, only)
        with concurrent.futures.ThreadPoolExecutor() as pool:
            running: dict[concurrent.futures.Future, str] = {}
            while len(self.tasks) < len(wanted):
                for name in kfp_dag.ready(tasks, self.tasks,
                                          wanted - set(self.tasks) - set(running.values())):
                    running[pool.submit(self._run_task, name)] = name
                if not running:
                    raise LauncherError(f"tasks {sorted(wanted - set(self.tasks))} depend on "
                                        "each other")
                done, _ = concurrent.futures.wait(
                    running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    self.tasks[running.pop(future)] = future.result()
        return self.tasks

    def _run_task(self, name: str) -> TaskRun:
        task = self.spec.root.dag.tasks[name]
        component = self.spec.components[task.component_ref.name]
        executor = self.deployment.executors[component.executor_label]
        kind = executor.WhichOneof("spec")
        if kind == "resolver":
            if self.mode == "kfp":
                raise LauncherError(f"task {name} is a resolver: open-source KFP's backend "
                                    "cannot run it (compile with --backend kfp)")
            return self._resolve(name, task, executor.resolver)
        if kind != "container":
            raise LauncherError(f"task {name} is a(n) {kind}: this launcher runs containers "
                                "and (in vertex mode) resolvers only")
        return self._run_container(name, task, component, executor.container)

    # --- the driver ---------------------------------------------------------------------

    def _inputs(self, task: pb.PipelineTaskSpec) -> pb.ExecutorInput.Inputs:
        inputs = pb.ExecutorInput.Inputs()
        for key, spec in task.inputs.parameters.items():
            kind = spec.WhichOneof("kind")
            if kind == "runtime_value":
                inputs.parameter_values[key].CopyFrom(spec.runtime_value.constant)
            elif kind == "component_input_parameter":
                if spec.component_input_parameter in self.parameters:
                    inputs.parameter_values[key].CopyFrom(
                        self.parameters[spec.component_input_parameter])
            elif kind == "task_output_parameter":
                producer = self.tasks[spec.task_output_parameter.producer_task]
                inputs.parameter_values[key].CopyFrom(_value(
                    producer.output_parameters[spec.task_output_parameter.output_parameter_key]))
            else:
                raise LauncherError(f"input parameter {key} of kind {kind} is not supported")
        for key, spec in task.inputs.artifacts.items():
            if spec.WhichOneof("kind") != "task_output_artifact":
                raise LauncherError(f"input artifact {key} is not a task output")
            producer = self.tasks[spec.task_output_artifact.producer_task]
            artifacts = producer.outputs.get(spec.task_output_artifact.output_artifact_key, [])
            if artifacts:  # a resolver that found nothing gives no input
                inputs.artifacts[key].artifacts.extend(artifacts)
        return inputs

    def _outputs(self, name: str, component: pb.ComponentSpec) -> pb.ExecutorInput.Outputs:
        """driver.go provisionOutputs: a task root per execution, one URI per output."""
        task_root = os.path.join(self.pipeline_root, self.spec.pipeline_info.name, self.run_id,
                                 name, uuid.uuid4().hex)
        outputs = pb.ExecutorInput.Outputs(
            output_file=os.path.join(task_root, "output_metadata.json"))
        for key, definition in component.output_definitions.artifacts.items():
            outputs.artifacts[key].artifacts.add(
                name=key, uri=os.path.join(task_root, key), type=definition.artifact_type,
                metadata=definition.metadata)
        for key in component.output_definitions.parameters:
            outputs.parameters[key].output_file = os.path.join(task_root, "parameters", key)
        return outputs

    def _resolve(self, name: str, task: pb.PipelineTaskSpec,
                 resolver: pb.PipelineDeploymentConfig.ResolverSpec) -> TaskRun:
        """Vertex's resolver: each output is what its filter query finds (placeholders on the
        input artifacts' metadata filled in first)."""
        inputs = self._inputs(task)

        def metadata(match: re.Match) -> str:
            [artifact] = inputs.artifacts[match[1]].artifacts
            return str(json_format.MessageToDict(artifact.metadata)[match[2]])

        outputs = {key: self.store.query(_INPUT_ARTIFACT.sub(metadata, query.filter))
                   if all(a.artifacts for a in inputs.artifacts.values()) else []
                   for key, query in resolver.output_artifact_queries.items()}
        return TaskRun(name, "resolved", None, None, outputs, {})

    # --- the launcher -------------------------------------------------------------------

    def _run_container(self, name: str, task: pb.PipelineTaskSpec, component: pb.ComponentSpec,
                       container: pb.PipelineDeploymentConfig.PipelineContainerSpec) -> TaskRun:
        executor_input = pb.ExecutorInput(inputs=self._inputs(task),
                                          outputs=self._outputs(name, component))
        _add_default_parameters(executor_input, component)
        log = ""
        if self.mode == "vertex" and container.lifecycle.HasField("pre_cache_check"):
            check = container.lifecycle.pre_cache_check
            log += self._execute(f"{name} (preCacheCheck)", executor_input,
                                 check.command, check.args, container)
            written = _read_executor_output(executor_input.outputs.output_file)
            for key, value in written.parameter_values.items():
                executor_input.inputs.parameter_values[key].CopyFrom(value)
        fingerprint = kfp_dag.cache_key(
            component, container,
            {k: [a.name for a in v.artifacts] for k, v in executor_input.inputs.artifacts.items()},
            {k: json_format.MessageToDict(v)
             for k, v in executor_input.inputs.parameter_values.items()})
        cached = self.store.cached(fingerprint) if task.caching_options.enable_cache else None
        if cached is not None:
            return TaskRun(name, "cached", fingerprint, executor_input, *cached)
        log += self._execute(name, executor_input, container.command, container.args, container)
        executor_output = _read_executor_output(executor_input.outputs.output_file)
        outputs = {}
        for key, artifacts in executor_input.outputs.artifacts.items():
            merged = pb.RuntimeArtifact()
            merged.CopyFrom(artifacts.artifacts[0])
            if executor_output.artifacts[key].artifacts:
                _merge_runtime_artifacts(executor_output.artifacts[key].artifacts[0], merged)
            outputs[key] = [merged]
        parameters = _output_parameters(executor_input, executor_output, component)
        # Only tasks that may be cached are entered in the cache (driver.go Container).
        self.store.record(fingerprint if task.caching_options.enable_cache else None,
                          outputs, parameters)
        return TaskRun(name, "executed", fingerprint, executor_input, outputs, parameters, log)

    def _execute(self, what: str, executor_input: pb.ExecutorInput, command: list[str],
                 args: list[str], container: pb.PipelineDeploymentConfig.PipelineContainerSpec
                 ) -> str:
        """launcher_v2 compileCmdAndArgs + execute: the spec's own command, in a subprocess."""
        placeholders = _placeholders(executor_input)
        argv = [_substitute(part, placeholders) for part in [*command, *args]]
        os.makedirs(os.path.dirname(executor_input.outputs.output_file), exist_ok=True)
        env = {**os.environ, **self.env, **{e.name: e.value for e in container.env},
               "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
        task_root = os.path.dirname(executor_input.outputs.output_file)
        result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=task_root)
        log = result.stdout + result.stderr
        log_path = os.path.join(task_root, "launcher.log")  # as KFP keeps each pod's log
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(log)
        if result.returncode != 0:
            raise LauncherError(f"task {what} exited with status {result.returncode} (log: "
                                f"{log_path}):\n{log[-8000:]}")
        return log


def _add_default_parameters(executor_input: pb.ExecutorInput,
                            component: pb.ComponentSpec) -> None:
    """launcher_v2 addDefaultParams: a component's own defaults for parameters not given."""
    given = executor_input.inputs.parameter_values
    for key, definition in component.input_definitions.parameters.items():
        if definition.HasField("default_value") and key not in given:
            given[key].CopyFrom(definition.default_value)


def _placeholders(executor_input: pb.ExecutorInput) -> dict[str, str]:
    """launcher_v2 getPlaceholders (local paths are the URIs here)."""
    values = {"{{$}}": json_format.MessageToJson(executor_input, indent=None)}
    for key, artifacts in executor_input.inputs.artifacts.items():
        if artifacts.artifacts:
            values[f"{{{{$.inputs.artifacts['{key}'].uri}}}}"] = artifacts.artifacts[0].uri
            values[f"{{{{$.inputs.artifacts['{key}'].path}}}}"] = artifacts.artifacts[0].uri
    for key, artifacts in executor_input.outputs.artifacts.items():
        values[f"{{{{$.outputs.artifacts['{key}'].uri}}}}"] = artifacts.artifacts[0].uri
        values[f"{{{{$.outputs.artifacts['{key}'].path}}}}"] = artifacts.artifacts[0].uri
    for key, value in executor_input.inputs.parameter_values.items():
        kind = value.WhichOneof("kind")
        values[f"{{{{$.inputs.parameters['{key}']}}}}"] = (
            value.string_value if kind == "string_value"
            else json.dumps(json_format.MessageToDict(value)))
    for key, parameter in executor_input.outputs.parameters.items():
        values[f"{{{{$.outputs.parameters['{key}'].output_file}}}}"] = parameter.output_file
    return values


def _substitute(text: str, placeholders: Mapping[str, str]) -> str:
    for placeholder, replacement in placeholders.items():
        text = text.replace(placeholder, replacement)
    return text


def _read_executor_output(path: str) -> pb.ExecutorOutput:
    """launcher_v2 getExecutorOutputFile: an absent file is an empty ExecutorOutput."""
    output = pb.ExecutorOutput()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            json_format.Parse(f.read(), output)
    return output


def _merge_runtime_artifacts(source: pb.RuntimeArtifact, target: pb.RuntimeArtifact) -> None:
    """launcher_v2 mergeRuntimeArtifacts: the executor's URI and metadata win (this
    kfp-pipeline-spec has no custom_path)."""
    if source.uri:
        target.uri = source.uri
    target.metadata.update(json_format.MessageToDict(source.metadata))


def _output_parameters(executor_input: pb.ExecutorInput, executor_output: pb.ExecutorOutput,
                       component: pb.ComponentSpec) -> dict[str, Any]:
    """launcher_v2 collectOutputParameters: the output file first, else each parameter's file."""
    values = {key: json_format.MessageToDict(value)
              for key, value in executor_output.parameter_values.items()}
    for key, parameter in executor_input.outputs.parameters.items():
        if key not in values:
            with open(parameter.output_file, encoding="utf-8") as f:
                text = f.read()
            kind = component.output_definitions.parameters[key].parameter_type
            values[key] = text if kind == pb.ParameterType.STRING else json.loads(text)
    return values
