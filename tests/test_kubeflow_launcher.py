"""The compiled Kubeflow/Vertex spec, executed: each task's own command from the YAML, run by
tests/kfp_launcher.py as KFP's driver and launcher would (see its docstring for what it
simplifies). One full open-source-KFP run of the smoke pipeline, compiled with --warm-start
(nothing served yet: from scratch), is shared by the module; the fra.txt-change and Vertex
cases then run only the tasks they are about, on the same root; last, a second scheduled run
of the same spec continues the first run's pushed model.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
from google.protobuf import json_format

from conftest import run_nmt
from kfp_launcher import LauncherError, LocalPipelineRun, TaskRun, read_spec
from runners import kfp_client
from runners import kubeflow_runner
from pipeline.config import PipelineConfig

IMAGE = "nmt-fra-eng:launcher-test"
EXAMPLE_GEN = "FraTxtExampleGen"
MODEL_RESOLVER = "latest_blessed_model_resolver-model-resolver"
TRAIN_STEPS = 12


@dataclasses.dataclass
class World:
    """A pipeline root with one complete KFP-mode run, and the specs compiled for it."""
    root: str
    data_dir: str  # what the run's data_root parameter pointed at (not the compiled default)
    kfp_spec: str
    vertex_spec: str
    tasks: dict[str, TaskRun]
    params: dict  # the run's parameter values


def compile_for(backend: str, root: str, path: str, warm_start: bool = False) -> str:
    """The smoke profile with local paths; the compiled data directory does not exist, so
    only a data_root override that reaches ExampleGen lets the run read fra.txt."""
    config = PipelineConfig(data_path=os.path.join(root, "compiled-default", "fra.txt"),
                            pipeline_root=root, profile="smoke", warm_start=warm_start)
    kubeflow_runner.compile_pipeline(config, IMAGE, path, backend=backend)
    return path


def metadata(artifact) -> dict:
    return json_format.MessageToDict(artifact.metadata)


@pytest.fixture(scope="module")
def world(fra_sample, tmp_path_factory) -> World:
    base = tmp_path_factory.mktemp("kfp_launcher")
    root, data_dir = str(base / "root"), str(base / "data")
    os.makedirs(data_dir)
    shutil.copy(fra_sample, data_dir)
    kfp_spec = compile_for("kfp", root, str(base / "kfp.yaml"), warm_start=True)
    vertex_spec = compile_for("vertex", root, str(base / "vertex.yaml"))
    # As `nmt kubeflow submit --param ...` would send them (a partial trainer_config merged).
    params = kfp_client.parameter_values(kfp_client.Package.read(kfp_spec), [
        f"data_root={data_dir}", f'train_args={{"num_steps": {TRAIN_STEPS}}}',
        'trainer_config={"hparams": {"label_smoothing": 0.05}}'])
    tasks = LocalPipelineRun(read_spec(kfp_spec), root, params).run()
    return World(root, data_dir, kfp_spec, vertex_spec, tasks, params)


def test_every_task_runs_its_own_command_and_a_model_is_pushed(world):
    assert {name: task.state for name, task in world.tasks.items()} == {
        name: "executed" for name in ("FraTxtExampleGen", "ImportSchemaGen", "StatisticsGen",
                                      "StrictExampleValidator", "Transform", "ServedModel",
                                      "Trainer", "Evaluator", "AtomicPusher")}
    # --warm-start with nothing served yet: ServedModel found none, the Trainer trained anew
    assert metadata(world.tasks["ServedModel"].artifact("model"))["served_version"] == ""
    pushed = metadata(world.tasks["AtomicPusher"].artifact("pushed_model"))
    assert pushed["pushed"] == 1
    version_dir = os.path.join(world.root, "serving", "nmt-fra-eng", pushed["pushed_version"])
    assert pushed["pushed_destination"] == version_dir
    assert os.path.isfile(os.path.join(version_dir, "saved_model.pb"))


def test_the_pushed_model_translates(world):
    result = run_nmt("translate", "--pipeline-root", world.root, "I am hungry.", "Go.",
                     env={"TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(result.stdout.splitlines()) == 2


def test_run_parameters_reach_example_gen_and_the_trainer(world):
    example_gen = world.tasks[EXAMPLE_GEN]
    assert example_gen.executor_input.inputs.parameter_values["input_base"].string_value == (
        world.data_dir)
    assert metadata(example_gen.artifact("examples"))["input_path"] == os.path.join(
        world.data_dir, "fra.txt")
    model_run = world.tasks["Trainer"].artifact("model_run").uri
    with open(os.path.join(model_run, "hparams.json"), encoding="utf-8") as f:
        hparams = json.load(f)
    assert hparams["train_steps"] == TRAIN_STEPS  # train_args
    assert hparams["label_smoothing"] == 0.05  # the partial trainer_config...
    # ... merged over the compiled one: checkpoints still go under the compiled root.
    assert os.listdir(os.path.join(world.root, "checkpoints"))


def test_example_gen_properties_and_the_blessing_round_trip(world):
    """What an executor writes into its output metadata is what the next task's input sees."""
    report = metadata(world.tasks[EXAMPLE_GEN].artifact("examples"))
    assert report["lines_read"] == report["pairs_kept"] + report["lines_rejected"] > 3000
    [downstream] = world.tasks["StatisticsGen"].executor_input.inputs.artifacts[
        "examples"].artifacts
    assert {k: metadata(downstream)[k] for k in report} == report
    blessing = world.tasks["Evaluator"].artifact("blessing")
    assert metadata(blessing)["blessed"] == 1
    # TFX names the model by its runtime artifact name, which a Vertex resolver looks up.
    assert metadata(blessing)["current_model_id"] == world.tasks["Trainer"].artifact("model").name
    [pusher_input] = world.tasks["AtomicPusher"].executor_input.inputs.artifacts[
        "model_blessing"].artifacts
    assert metadata(pusher_input) == metadata(blessing)


def test_a_changed_fra_txt_reexecutes_example_gen_on_kfp(world):
    """Issue 12 item 1: the same data_root with new content, as a nightly run sees it. KFP's
    cache key (parameters, command, image) is unchanged, so had ExampleGen been cached in the
    first run this would be a cache hit; compiled uncached, it reads the new file."""
    path = os.path.join(world.data_dir, "fra.txt")
    with open(path, "rb") as f:
        original = f.read()
    try:
        with open(path, "wb") as f:
            f.write(b"".join(original.splitlines(keepends=True)[:-100]))
        run = LocalPipelineRun(read_spec(world.kfp_spec), world.root,
                               {"data_root": world.data_dir})
        example_gen = run.run(only=EXAMPLE_GEN)[EXAMPLE_GEN]
    finally:
        with open(path, "wb") as f:
            f.write(original)
    assert example_gen.state == "executed"
    assert example_gen.fingerprint == world.tasks[EXAMPLE_GEN].fingerprint  # same cache key
    assert metadata(example_gen.artifact("examples"))["lines_read"] == (
        metadata(world.tasks[EXAMPLE_GEN].artifact("examples"))["lines_read"] - 100)


def test_vertex_runs_the_fingerprinting_driver_and_caches_on_it(world):
    """preCacheCheck puts fra.txt's fingerprint into ExampleGen's parameters, hence into the
    cache key: the same file is a cache hit, and (key differs) a new one would not be."""
    spec = read_spec(world.vertex_spec)
    first = LocalPipelineRun(spec, world.root, {"data_root": world.data_dir},
                             mode="vertex").run(only=EXAMPLE_GEN)[EXAMPLE_GEN]
    assert first.state == "executed"
    parameters = first.executor_input.inputs.parameter_values
    assert "total_bytes:" in parameters["input_fingerprint"].string_value
    assert parameters["span"].number_value == 0
    again = LocalPipelineRun(spec, world.root, {"data_root": world.data_dir},
                             mode="vertex").run(only=EXAMPLE_GEN)[EXAMPLE_GEN]
    assert (again.state, again.fingerprint) == ("cached", first.fingerprint)
    assert again.artifact("examples").uri == first.artifact("examples").uri


def test_vertex_resolvers_find_the_latest_blessed_model(world):
    tasks = LocalPipelineRun(read_spec(world.vertex_spec), world.root,
                             mode="vertex").run(only=MODEL_RESOLVER)
    assert set(tasks) == {MODEL_RESOLVER, "latest_blessed_model_resolver-model-blessing-resolver"}
    baseline = tasks[MODEL_RESOLVER].artifact("model")
    assert baseline.uri == world.tasks["Trainer"].artifact("model").uri


def test_open_source_kfp_cannot_run_a_vertex_spec(world):
    with pytest.raises(LauncherError,
                       match="is a resolver: open-source KFP's backend cannot run it"):
        LocalPipelineRun(read_spec(world.vertex_spec), world.root).run(only=MODEL_RESOLVER)


def test_translate_reads_a_serving_directory_through_tf_io_gfile(world):
    """As on gs://: the pushed model copied to TensorFlow's in-memory filesystem (ram://),
    which no os.path call can see, is found through tf.io.gfile (loading it is TensorFlow's
    own gfile path; the subprocess test above translates with it)."""
    import tensorflow as tf

    from inference import translate

    pushed = metadata(world.tasks["AtomicPusher"].artifact("pushed_model"))
    serving = "ram://serving/nmt-fra-eng"
    for directory, _, files in tf.io.gfile.walk(pushed["pushed_destination"]):
        target = directory.replace(pushed["pushed_destination"],
                                   f"{serving}/{pushed['pushed_version']}", 1)
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), f"{target}/{name}")
    tf.io.gfile.makedirs(f"{serving}/9999999999")  # a version without saved_model.pb yet
    assert translate.resolve_model_dir(serving) == f"{serving}/{pushed['pushed_version']}"
    with pytest.raises(translate.TranslateError, match="No pushed model in ram://nothing"):
        translate.resolve_model_dir("ram://nothing")


def test_the_next_scheduled_run_continues_the_served_model(world):
    """The same compiled spec run again on the same root, as a schedule's next run, up to the
    Trainer (what follows is as in the first run): its ServedModel (never cached) takes the
    version the first run pushed, Transform keeps that model's vocabulary, and the Trainer
    starts from its weights (issue #65 item 5). Last in the module: it adds a model."""
    first = metadata(world.tasks["AtomicPusher"].artifact("pushed_model"))
    tasks = LocalPipelineRun(read_spec(world.kfp_spec), world.root, world.params).run(
        only="Trainer")
    served = tasks["ServedModel"]
    assert served.state == "executed"
    assert metadata(served.artifact("model"))["served_version"] == first["pushed_version"]
    assert tasks["Trainer"].state == "executed"
    trained = os.path.join(tasks["Trainer"].artifact("model").uri, "Format-Serving")
    for name in ("joint_vocab", "joint_vocab.model"):
        with open(os.path.join(first["pushed_destination"], "assets", name), "rb") as a, \
                open(os.path.join(trained, "assets", name), "rb") as b:
            assert a.read() == b.read(), name
    with open(os.path.join(trained, "assets.extra", "nmt_training.json"),
              encoding="utf-8") as f:
        assert json.load(f)["total_train_steps"] == 2 * TRAIN_STEPS
