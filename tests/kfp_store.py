"""An ML Metadata store of this pipeline's runs on Kubeflow Pipelines v2, written the way KFP's
own driver and launcher write it, so that `nmt metadata` is tested on that layout without a
cluster (and on any store the MLMD API reaches: SQLite, MySQL).

`KfpClient` mirrors, write for write through the real MLMD Python API, the Go client the KFP v2
backend uses, kubeflow/pipelines backend/src/v2/metadata/client.go (KFP 2.x): GetPipeline,
CreateExecution, PrePublishExecution, RecordArtifact, PublishExecution,
GetOutputArtifactsByExecutionId, and converter.go's StructValueToMLMDValue. `run_pipeline`
plays the driver and the launcher over the root DAG of the PipelineSpec that
`nmt kubeflow compile` writes (runners.kubeflow_runner.compile_pipeline), in the task order
and with the cache key that tests/kfp_launcher.py uses too (tests/kfp_dag.py):

- backend/src/v2/driver/driver.go RootDAG: the pipeline and run contexts, and the run's
  system.DAGExecution "run/<run id>" with the runtime parameters as inputs. KFP never marks a
  root DAG finished, so it stays RUNNING.
- driver.go Container: a system.ContainerExecution per task, its input parameters resolved
  from the spec and its input artifacts from the producer tasks' OUTPUT events; output URIs are
  <run's pipeline root>/<task>/<output> (provisionOutputs). A cache hit is published CACHED
  at once with the cached execution's output artifacts (cache.go reuseCachedOutputs); tasks
  downstream of a failure never get an execution.
- backend/src/v2/component/launcher_v2.go Execute: PrePublishExecution, the executor, then
  RecordArtifact per output (uploadOutputArtifacts) and PublishExecution COMPLETE, or FAILED
  with no outputs when the command fails; then a cache entry for the fingerprint.

The artifact metadata the TFX executor hands back (which KFP records as custom properties)
follows tfx/orchestration/kubeflow/v2/container/kubeflow_v2_entrypoint_utils.py
(to_runtime_artifact: properties and custom properties in one struct, a custom one that shares
a property's name prefixed "custom:"; refactor_model_blessing: model ids as runtime artifact
names) with the custom properties this pipeline's components set, as in the local smoke store:
the parse report and input file on ExampleGen's Examples (components/fra_example_gen), the
Evaluator's blessing, the AtomicPusher's pushed version and destination.

Unlike a cluster, the pipeline root is a local directory (a cluster's is gs:// or minio://),
and the executors are stand-ins that write only what `nmt metadata` reads (splits, hparams.json,
history.json, a TFMA metrics file), with scores that follow from the training steps.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import uuid
from typing import Any, Callable, Iterable, Mapping

import ml_metadata as mlmd
import yaml
from google.protobuf import json_format, struct_pb2
from kfp.pipeline_spec import pipeline_spec_pb2 as pb
from ml_metadata.proto import metadata_store_pb2 as mlmd_pb

import kfp_dag
from components.fra_example_gen import fingerprint

# client.go
PIPELINE_CONTEXT, RUN_CONTEXT = "system.Pipeline", "system.PipelineRun"
CONTAINER_EXECUTION, DAG_EXECUTION = "system.ContainerExecution", "system.DAGExecution"
NAMESPACE = "kubeflow-user-example-com"
RUN_RESOURCE = "run-resource"  # driver.go RootDAG: "TODO(Bobgy): fill in run resource."
STORE_SESSION_INFO = json.dumps({"Provider": "minio", "Params": {"fromEnv": "false"}})
IMAGE = "registry.example/nmt-fra-eng:test"

TFX_VERSION = "1.16.0"
BLEU_PER_STEP = 0.05  # the stand-in Evaluator's BLEU is train steps times this
MIN_BLEU = 5.0  # compiled into the Evaluator's eval_config: 100+ steps are blessed
LENGTH_BUCKETS = {"01-05": 1.2, "06-10": 0.8}  # BLEU per English length bucket, relative
STATE_NAMES = {mlmd_pb.Execution.COMPLETE: "executed", mlmd_pb.Execution.CACHED: "cached",
               mlmd_pb.Execution.FAILED: "failed"}  # as `nmt metadata runs` names them


# --- client.go ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pipeline:
    context: mlmd_pb.Context
    run_context: mlmd_pb.Context

    @property
    def root(self) -> str:
        return self.run_context.custom_properties["pipeline_root"].string_value


@dataclasses.dataclass
class ExecutionConfig:
    """client.go ExecutionConfig: what the driver knows when it creates an execution."""
    execution_type: str
    task_name: str = ""
    name: str = ""
    parent_dag_id: int = 0
    input_parameters: dict[str, Any] | None = None
    input_artifact_ids: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    image: str = ""
    cached_mlmd_execution_id: str = ""
    finger_print: str = ""


def generate_output_uri(root: str, *paths: str) -> str:
    """client.go GenerateOutputURI (no query string here)."""
    return f"{root.rstrip('/')}/{os.path.normpath(os.path.join(*paths))}"


def struct_value_to_mlmd_value(value: Any) -> mlmd_pb.Value:
    """converter.go StructValueToMLMDValue: KFP has no integers, and keeps bools as ints."""
    if isinstance(value, bool):
        return mlmd_pb.Value(int_value=int(value))
    if isinstance(value, (int, float)):
        return mlmd_pb.Value(double_value=float(value))
    if isinstance(value, str):
        return mlmd_pb.Value(string_value=value)
    wrapped = mlmd_pb.Value()
    wrapped.struct_value.update({"list" if isinstance(value, list) else "struct": value})
    return wrapped


def _event(kind: int, name: str, artifact_id: int | None = None) -> mlmd_pb.Event:
    event = mlmd_pb.Event(type=kind, artifact_id=artifact_id)
    event.path.steps.add(key=name)  # client.go eventPath: the artifact's name for this task
    return event


class KfpClient:
    """backend/src/v2/metadata/client.go, method for method, on an MLMD store."""

    def __init__(self, store: mlmd.MetadataStore):
        self.store = store

    def _get_or_insert_context(self, name: str, type_name: str,
                               custom: Mapping[str, str]) -> mlmd_pb.Context:
        found = self.store.get_context_by_type_and_name(type_name, name)
        if found is not None:
            return found
        context = mlmd_pb.Context(
            name=name, type_id=self.store.put_context_type(mlmd_pb.ContextType(name=type_name)))
        for key, value in custom.items():
            context.custom_properties[key].string_value = value
        [context_id] = self.store.put_contexts([context])
        return self.store.get_contexts_by_id([context_id])[0]

    def get_pipeline(self, pipeline_name: str, run_id: str, namespace: str, run_resource: str,
                     pipeline_root: str, store_session_info: str) -> Pipeline:
        pipeline = self._get_or_insert_context(pipeline_name, PIPELINE_CONTEXT, {})
        run = self._get_or_insert_context(run_id, RUN_CONTEXT, {
            "namespace": namespace, "resource_name": run_resource,
            "pipeline_root": generate_output_uri(pipeline_root, pipeline_name, run_id),
            "store_session_info": store_session_info})
        if not self.store.get_parent_contexts_by_context(run.id):
            self.store.put_parent_contexts(
                [mlmd_pb.ParentContext(child_id=run.id, parent_id=pipeline.id)])
        return Pipeline(pipeline, run)

    def create_execution(self, pipeline: Pipeline, config: ExecutionConfig) -> mlmd_pb.Execution:
        execution = mlmd_pb.Execution(
            type_id=self.store.put_execution_type(
                mlmd_pb.ExecutionType(name=config.execution_type)),
            last_known_state=mlmd_pb.Execution.RUNNING)
        custom = execution.custom_properties
        # "for now it defaults to task name"
        custom["display_name"].string_value = custom["task_name"].string_value = config.task_name
        if config.name:
            execution.name = config.name
        if config.parent_dag_id:
            custom["parent_dag_id"].int_value = config.parent_dag_id
        if config.execution_type == CONTAINER_EXECUTION:
            for key in ("pod_name", "pod_uid", "namespace"):
                custom[key].string_value = ""  # the launcher fills them in (PrePublish)
            custom["image"].string_value = config.image
            if config.cached_mlmd_execution_id:
                custom["cached_execution_id"].string_value = config.cached_mlmd_execution_id
            if config.finger_print:
                custom["cache_fingerprint"].string_value = config.finger_print
        if config.input_parameters is not None:
            custom["inputs"].struct_value.SetInParent()
            custom["inputs"].struct_value.update(config.input_parameters)
        events = [(None, _event(mlmd_pb.Event.INPUT, name, artifact_id))
                  for name, ids in config.input_artifact_ids.items() for artifact_id in ids]
        execution_id, _, _ = self.store.put_execution(
            execution, events, [pipeline.context, pipeline.run_context])
        return self.store.get_executions_by_id([execution_id])[0]

    def pre_publish_execution(self, execution: mlmd_pb.Execution, pod_name: str, pod_uid: str,
                              namespace: str) -> None:
        execution.custom_properties["pod_name"].string_value = pod_name
        execution.custom_properties["pod_uid"].string_value = pod_uid
        execution.custom_properties["namespace"].string_value = namespace
        execution.last_known_state = mlmd_pb.Execution.RUNNING
        self.store.put_execution(execution, [], [])

    def record_artifact(self, output_name: str, schema: str, uri: str,
                        metadata: Mapping[str, Any]) -> mlmd_pb.Artifact:
        artifact = mlmd_pb.Artifact(
            uri=uri, state=mlmd_pb.Artifact.LIVE,
            type_id=self.store.put_artifact_type(
                mlmd_pb.ArtifactType(name=yaml.safe_load(schema)["title"])))
        for key, value in metadata.items():
            artifact.custom_properties[key].CopyFrom(struct_value_to_mlmd_value(value))
        custom = artifact.custom_properties
        if "display_name" not in custom:
            custom["display_name"].string_value = output_name
        if "store_session_info" not in custom:
            custom["store_session_info"].string_value = STORE_SESSION_INFO
        [artifact_id] = self.store.put_artifacts([artifact])
        return self.store.get_artifacts_by_id([artifact_id])[0]

    def publish_execution(self, execution: mlmd_pb.Execution, pipeline: Pipeline,
                          output_parameters: Mapping[str, Any] | None,
                          output_artifacts: Mapping[str, mlmd_pb.Artifact], state: int) -> None:
        execution.last_known_state = state
        if output_parameters is not None:
            execution.custom_properties["outputs"].struct_value.SetInParent()
            execution.custom_properties["outputs"].struct_value.update(output_parameters)
        events = [(None, _event(mlmd_pb.Event.OUTPUT, name, artifact.id))
                  for name, artifact in output_artifacts.items()]
        self.store.put_execution(execution, events, [pipeline.context, pipeline.run_context])

    def get_output_artifacts_by_execution_id(self, execution_id: int
                                             ) -> dict[str, mlmd_pb.Artifact]:
        events = [e for e in self.store.get_events_by_execution_ids([execution_id])
                  if e.type == mlmd_pb.Event.OUTPUT]
        artifacts = {a.id: a for a in self.store.get_artifacts_by_id(
            [e.artifact_id for e in events])}
        return {e.path.steps[0].key: artifacts[e.artifact_id] for e in events}


# --- The TFX executors, as stand-ins -------------------------------------------------------

Inputs = Mapping[str, mlmd_pb.Artifact]
Executor = Callable[[Mapping[str, Any], Inputs, Mapping[str, str]], dict[str, dict[str, Any]]]
_TFX = {"tfx_version": TFX_VERSION, "is_external": 0}  # on every TFX artifact


def _write_records(path: str, records: Iterable[bytes], gzip: bool = False) -> None:
    import tensorflow as tf  # only to write TFRecord files

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, options="GZIP" if gzip else None) as writer:
        for record in records:
            writer.write(record)


def _example(english: str, french: list[str]) -> bytes:
    import tensorflow as tf

    feature = {"english": tf.train.Feature(bytes_list=tf.train.BytesList(value=[english.encode()])),
               "french": tf.train.Feature(bytes_list=tf.train.BytesList(
                   value=[f.encode() for f in french]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _example_gen(params: Mapping[str, Any], inputs: Inputs,
                 outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """FraTxtExampleGen: fra.txt's pairs grouped by English sentence, hashed into the output
    config's splits, and the parse report as custom properties."""
    pattern = json.loads(params["input_config"])["splits"][0]["pattern"]
    path = os.path.join(params["input_base"], pattern)
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    pairs = [line.split("\t")[:2] for line in lines if line.count("\t") >= 1]
    references: dict[str, list[str]] = {}
    for english, french in pairs:
        references.setdefault(english, []).append(french)
    splits = json.loads(params["output_config"])["split_config"]["splits"]
    buckets = [s["name"] for s in splits for _ in range(s["hash_buckets"])]
    by_split: dict[str, list[bytes]] = {s["name"]: [] for s in splits}
    for english, french in references.items():
        bucket = int(hashlib.md5(english.encode()).hexdigest(), 16) % len(buckets)
        by_split[buckets[bucket]].append(_example(english, french))
    for name, records in by_split.items():
        _write_records(os.path.join(outputs["examples"], f"Split-{name}",
                                    "data_tfrecord-00000-of-00001.gz"), records, gzip=True)
    source = file_fingerprint(path)
    report = {"lines_read": len(lines), "pairs_kept": len(pairs),
              "lines_rejected": len(lines) - len(pairs), "examples": len(references),
              "input": source}
    return {"examples": {
        **_TFX, "split_names": json.dumps(list(by_split)), "custom:span": 0,
        "payload_format": "FORMAT_TF_EXAMPLE", "file_format": "tfrecords_gzip",
        "input_fingerprint": f"split:single_split,num_files:1,total_bytes:{source['size_bytes']}",
        **{key: report[key] for key in ("lines_read", "pairs_kept", "lines_rejected", "examples")},
        **{f"input_{key}": str(value) for key, value in source.items()},
        "parse_report": json.dumps(report, sort_keys=True)}}


def _splits(examples: mlmd_pb.Artifact) -> list[str]:
    return json.loads(examples.custom_properties["split_names"].string_value)


def _statistics_gen(params: Mapping[str, Any], inputs: Inputs,
                    outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    splits = json.dumps(_splits(inputs["examples"]))
    return {"statistics": {**_TFX, "split_names": splits, "stats_dashboard_link": ""}}


def _validator(params: Mapping[str, Any], inputs: Inputs,
               outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    statistics = inputs["statistics"].custom_properties["split_names"].string_value
    return {"anomalies": {**_TFX, "split_names": statistics}}


def _transform(params: Mapping[str, Any], inputs: Inputs,
               outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Transform: every split transformed (the same records, here), and a transform graph."""
    examples = inputs["examples"]
    for split in _splits(examples):
        source = os.path.join(examples.uri, f"Split-{split}", "data_tfrecord-00000-of-00001.gz")
        target = os.path.join(outputs["transformed_examples"], f"Split-{split}",
                              "transformed_examples-00000-of-00001.gz")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(source, "rb") as f, open(target, "wb") as g:
            g.write(f.read())
    os.makedirs(os.path.join(outputs["transform_graph"], "transform_fn"), exist_ok=True)
    result: dict[str, dict[str, Any]] = {key: dict(_TFX) for key in outputs}
    result["transformed_examples"]["split_names"] = json.dumps(_splits(examples))
    return result


def _trainer(params: Mapping[str, Any], inputs: Inputs,
             outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Trainer: the ModelRun's hparams.json and history.json (as trainer_module.task writes
    them), and a serving model that says how long it trained."""
    steps = json.loads(params["train_args"])["num_steps"]
    profile = json.loads(params["custom_config"])["profile"]
    hparams = {"profile": profile, "train_steps": steps, "checkpoint_every": min(20, steps),
               "d_model": 32}
    history = [{"step": step, "loss": 8.0 / (1 + step / 50), "val_loss": 8.5 / (1 + step / 50),
                "masked_accuracy": step / (step + 100), "val_masked_accuracy": step / (step + 120),
                "perplexity": 3000.0 / (1 + step), "val_perplexity": 3500.0 / (1 + step)}
               for step in range(hparams["checkpoint_every"], steps + 1,
                                 hparams["checkpoint_every"])]
    for name, value in (("hparams.json", hparams), ("history.json", history)):
        os.makedirs(outputs["model_run"], exist_ok=True)
        with open(os.path.join(outputs["model_run"], name), "w") as f:
            json.dump(value, f, indent=1)
    serving = os.path.join(outputs["model"], "Format-Serving")
    os.makedirs(serving, exist_ok=True)
    with open(os.path.join(serving, "training.json"), "w") as f:
        json.dump({"train_steps": steps}, f)
    return {"model": dict(_TFX), "model_run": dict(_TFX)}


def scores(train_steps: int) -> dict[str, Any]:
    """The stand-in Evaluator's corpus BLEU/chrF for a model trained this many steps."""
    bleu = train_steps * BLEU_PER_STEP
    return {"overall": _scores(bleu),
            "by_length": {bucket: _scores(bleu * k) for bucket, k in LENGTH_BUCKETS.items()}}


def _scores(bleu: float) -> dict[str, float]:
    """All four figures of the Evaluator: against one reference (the gate), then all."""
    return {"bleu_1ref": bleu, "chrf_1ref": 20 + bleu, "bleu": 1.25 * bleu,
            "chrf": 25 + bleu}


def _write_evaluation(uri: str, model_uri: str, result: Mapping[str, Any]) -> None:
    """A TFMA evaluation result: its eval_config.json and MetricsForSlice records."""
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.proto import metrics_for_slice_pb2

    config = tfma.EvalConfig(slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(
        feature_keys=["english_length_bucket"])])
    os.makedirs(uri, exist_ok=True)
    with open(os.path.join(uri, "eval_config.json"), "w") as f:
        json.dump({"evalConfig": json_format.MessageToDict(config), "version": tfma.__version__,
                   "dataLocation": "<user provided PCollection>", "fileFormat": "<unknown>",
                   "modelLocations": {"": model_uri}}, f)
    records = []
    for bucket, values in [(None, result["overall"]), *result["by_length"].items()]:
        metrics = metrics_for_slice_pb2.MetricsForSlice()
        if bucket:
            metrics.slice_key.single_slice_keys.add(column="english_length_bucket",
                                                    bytes_value=bucket.encode())
        for name, value in (("corpus_bleu_1ref", values["bleu_1ref"]),
                            ("corpus_chrf_1ref", values["chrf_1ref"]),
                            ("corpus_bleu", values["bleu"]), ("corpus_chrf", values["chrf"])):
            entry = metrics.metric_keys_and_values.add()
            entry.key.name = name
            entry.key.example_weighted.SetInParent()
            entry.value.double_value.value = value
        records.append(metrics.SerializeToString())
    _write_records(os.path.join(uri, "metrics-00000-of-00001.tfrecord"), records)


def _bleu_bound(eval_config: str) -> float:
    """The lower bound of the compiled eval_config's gating CorpusBleu (TFX writes protos as
    JSON with proto field names)."""
    return next(threshold["threshold"]["value_threshold"].get("lower_bound", 0.0)
                for spec in json.loads(eval_config)["metrics_specs"]
                for metric in spec["metrics"] if metric["class_name"] == "CorpusBleu"
                for threshold in metric.get("per_slice_thresholds", []))


def _evaluator(params: Mapping[str, Any], inputs: Inputs,
               outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Evaluator without a baseline (open-source KFP has no resolver): blessed when BLEU clears
    the compiled threshold."""
    model = inputs["model"]
    with open(os.path.join(model.uri, "Format-Serving", "training.json")) as f:
        result = scores(json.load(f)["train_steps"])
    _write_evaluation(outputs["evaluation"], model.uri, result)
    blessed = result["overall"]["bleu_1ref"] >= _bleu_bound(params["eval_config"])
    os.makedirs(outputs["blessing"], exist_ok=True)
    open(os.path.join(outputs["blessing"], "BLESSED" if blessed else "NOT_BLESSED"), "w").close()
    return {"evaluation": dict(_TFX),
            "blessing": {**_TFX, "blessed": int(blessed), "current_model": model.uri,
                         # refactor_model_blessing: the runtime artifact name, KFP's MLMD id
                         "current_model_id": str(model.id)}}


def _pusher(params: Mapping[str, Any], inputs: Inputs,
            outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """AtomicPusher: a blessed model becomes the next version under the serving directory."""
    blessing = inputs["model_blessing"].custom_properties["blessed"]
    if not (blessing.int_value or blessing.double_value):
        return {"pushed_model": {**_TFX, "pushed": 0}}
    base = json.loads(params["push_destination"])["filesystem"]["base_directory"]
    existing = [int(v) for v in os.listdir(base) if v.isdigit()] if os.path.isdir(base) else []
    version = str(max([int(time.time())] + [v + 1 for v in existing]))
    destination = os.path.join(base, version)
    os.makedirs(destination)
    os.makedirs(outputs["pushed_model"], exist_ok=True)
    return {"pushed_model": {**_TFX, "pushed": 1, "pushed_version": version,
                             "pushed_destination": destination}}


EXECUTORS: dict[str, Executor] = {
    "FraTxtExampleGen": _example_gen, "StatisticsGen": _statistics_gen,
    "StrictExampleValidator": _validator, "Transform": _transform, "Trainer": _trainer,
    "Evaluator": _evaluator, "AtomicPusher": _pusher,
}


def _default_executor(params: Mapping[str, Any], inputs: Inputs,
                      outputs: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    for uri in outputs.values():
        os.makedirs(uri, exist_ok=True)
    return {key: dict(_TFX) for key in outputs}


# --- The driver and the launcher over the compiled spec -----------------------------------

@dataclasses.dataclass
class Task:
    """One task of one run as written: its execution, state and output artifact ids."""
    execution: int
    state: str  # executed, cached, failed
    outputs: dict[str, int]
    inputs: dict[str, int]


@dataclasses.dataclass
class Run:
    id: str
    parameters: dict[str, Any]
    tasks: dict[str, Task]  # in the order they ran

    @property
    def status(self) -> str:
        return "failed" if any(t.state == "failed" for t in self.tasks.values()) else "complete"


def compile_spec(root: str, data_path: str) -> Any:
    """This pipeline as `nmt kubeflow compile --backend kfp` compiles it (no resolver)."""
    from runners import kubeflow_runner
    from pipeline.config import PipelineConfig

    config = PipelineConfig(data_path=data_path, pipeline_root=root, profile="smoke",
                            min_bleu=MIN_BLEU, compare_with_latest_blessed=False)
    return kubeflow_runner.compile_pipeline(config, IMAGE, os.path.join(root, "pipeline.yaml"))


def _value(value: struct_pb2.Value) -> Any:
    return json_format.MessageToDict(value)


def run_pipeline(client: KfpClient, spec: Any, parameters: Mapping[str, Any],
                 cache: dict[str, str], fail: Iterable[str] = ()) -> Run:
    """One run of the compiled pipeline, as KFP's driver and launcher record it; `cache` is
    KFP's cache table (fingerprint -> MLMD execution id), shared by the runs."""
    run_id = str(uuid.uuid4())
    runtime = {name: _value(definition.default_value)
               for name, definition in spec.root.input_definitions.parameters.items()}
    runtime.update(parameters)
    pipeline = client.get_pipeline(spec.pipeline_info.name, run_id, NAMESPACE, RUN_RESOURCE,
                                   spec.default_pipeline_root, STORE_SESSION_INFO)
    dag = client.create_execution(pipeline, ExecutionConfig(
        DAG_EXECUTION, name=f"run/{run_id}", input_parameters=runtime))
    run, executions = Run(run_id, runtime, {}), {}
    tasks = spec.root.dag.tasks
    deployment = json_format.ParseDict(json_format.MessageToDict(spec.deployment_spec),
                                       pb.PipelineDeploymentConfig())
    for name in kfp_dag.run_order(tasks):
        task = tasks[name]
        succeeded = {done for done, record in run.tasks.items() if record.state != "failed"}
        if not kfp_dag.upstream(task) <= succeeded:
            continue  # Argo never starts a task whose upstream failed
        component = spec.components[task.component_ref.name]
        container = deployment.executors[component.executor_label].container
        params = {key: runtime[p.component_input_parameter] if p.component_input_parameter
                  else _value(p.runtime_value.constant)
                  for key, p in task.inputs.parameters.items()}
        inputs = {key: client.get_output_artifacts_by_execution_id(
                      executions[a.task_output_artifact.producer_task])[
                      a.task_output_artifact.output_artifact_key]
                  for key, a in task.inputs.artifacts.items()}
        input_ids = {key: [artifact.id] for key, artifact in inputs.items()}
        # (input artifacts named by their MLMD ids)
        fingerprint = kfp_dag.cache_key(
            component, container, {key: [str(i) for i in ids] for key, ids in input_ids.items()},
            params)
        cached = cache.get(fingerprint, "") if task.caching_options.enable_cache else ""
        execution = client.create_execution(pipeline, ExecutionConfig(
            CONTAINER_EXECUTION, task_name=name, parent_dag_id=dag.id, input_parameters=params,
            input_artifact_ids=input_ids, image=IMAGE, cached_mlmd_execution_id=cached,
            finger_print=fingerprint))
        executions[name] = execution.id
        if cached:
            outputs = client.get_output_artifacts_by_execution_id(int(cached))
            client.publish_execution(execution, pipeline, {}, outputs, mlmd_pb.Execution.CACHED)
        else:
            client.pre_publish_execution(execution, f"{spec.pipeline_info.name}-{name.lower()}-"
                                         f"{execution.id}", str(uuid.uuid4()), NAMESPACE)
            if name in fail:  # the command failed: FAILED, no outputs, no cache entry
                client.publish_execution(execution, pipeline, None, {}, mlmd_pb.Execution.FAILED)
                outputs = {}
            else:
                definitions = component.output_definitions.artifacts
                uris = {key: generate_output_uri(pipeline.root, name, key) for key in definitions}
                metadata = EXECUTORS.get(name, _default_executor)(params, inputs, uris)
                outputs = {key: client.record_artifact(
                    key, definitions[key].artifact_type.instance_schema, uris[key],
                    metadata[key]) for key in sorted(definitions)}
                client.publish_execution(execution, pipeline, {}, outputs,
                                         mlmd_pb.Execution.COMPLETE)
                cache[fingerprint] = str(execution.id)
        state = client.store.get_executions_by_id([execution.id])[0].last_known_state
        run.tasks[name] = Task(execution.id, STATE_NAMES[state],
                               {key: a.id for key, a in outputs.items()},
                               {key: a.id for key, a in inputs.items()})
    return run


# --- The store the tests read --------------------------------------------------------------

FRA_LINES = [f"Sentence number {i}.\tPhrase numéro {i}.\tCC-BY 2.0 (France) #{i}"
             for i in range(60)] + [
    "Sentence number 3.\tUne autre traduction 3.\tCC-BY 2.0 (France) #1003",  # a 2nd reference
    "a line without any tab",  # rejected
]


@dataclasses.dataclass
class KfpStore:
    """What was written: enough for a test to know every answer without computing it again."""
    root: str
    data: dict[str, Any]  # the input file: path, size_bytes, sha256
    runs: list[Run]  # oldest first
    artifacts: dict[int, mlmd_pb.Artifact]  # as stored (KFP's layout)

    def run(self, name: str) -> Run:
        return self.runs[SCENARIO_NAMES.index(name)]

    def artifact(self, run: str, task: str, key: str) -> mlmd_pb.Artifact:
        return self.artifacts[self.run(run).tasks[task].outputs[key]]


# trained: every task executes, the model is blessed and pushed; worse: the upstream tasks are
# cached, a 2-step model is not blessed, not pushed; broken: the Trainer fails.
SCENARIO: tuple[tuple[str, int, tuple[str, ...]], ...] = (
    ("trained", 200, ()), ("worse", 2, ()), ("broken", 400, ("Trainer",)))
SCENARIO_NAMES = [name for name, _, _ in SCENARIO]


def write_data(root: str) -> str:
    path = os.path.join(root, "data", "fra.txt")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(FRA_LINES) + "\n")
    return path


def file_fingerprint(path: str) -> dict[str, Any]:
    """What the real executor records of a one-file input (path, size, sha256)."""
    size = os.path.getsize(path)
    return fingerprint.input_summary(path, {path: size},
                                     {path: fingerprint.file_digest(path, size)})


def write_store(config: mlmd_pb.ConnectionConfig, spec: Any, data_path: str) -> KfpStore:
    """The scenario's runs of the compiled pipeline into the store `config` names."""
    client = KfpClient(mlmd.MetadataStore(config))
    cache: dict[str, str] = {}
    runs = [run_pipeline(client, spec, {"train_args": json.dumps({"num_steps": steps})}, cache,
                         fail) for _, steps, fail in SCENARIO]
    ids = sorted({a for run in runs for task in run.tasks.values() for a in task.outputs.values()})
    return KfpStore(root=spec.default_pipeline_root, data=file_fingerprint(data_path), runs=runs,
                    artifacts={a.id: a for a in client.store.get_artifacts_by_id(ids)})
