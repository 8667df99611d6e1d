"""`nmt run --warm-start` (issue #65): a run continues the newest served model, its weights,
recipe and vocabulary; ML Metadata links the new model to the old; a run that cannot continue
it says why before anything runs. The pipeline tests share one pipeline root: a first run
(nothing served: from scratch), then a warm-started one on the same data."""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from helpers import last_line, latest_artifact, open_store, run_nmt, smoke_args, versions
from metadata.diff import diff_runs
from metadata.runs import list_runs
from pipeline import warm_start
from pipeline.config import PipelineConfig, pipeline_arguments
from trainer_module import budget, callbacks, devices, optimization
from trainer_module import hparams as hparams_lib
from trainer_module import task
from trainer_module import warm_start as training
from trainer_module.optimization import learning_rate_schedule, peak_learning_rate
from trainer_module.settings import HISTORY_FILE, TRAINING_STATE
from transform_module.preprocessing import analyze_in_memory
from transform_module.sentencepiece import served_assets
from transform_module.tokens import DEFAULT_VOCAB_SIZE

FIRST_STEPS, SECOND_STEPS = 20, 20  # one checkpoint each (the smoke profile's every 20)
KEPT = hparams_lib.get_profile("smoke").keep_checkpoints + 1  # the second run's --hparam


# -- the learning rate of a continued run ------------------------------------------------------

def test_a_continued_schedule_goes_on_past_the_peak_after_a_short_rise():
    hparams = dataclasses.replace(hparams_lib.get_profile("cpu"), train_steps=2000)
    fresh = learning_rate_schedule(hparams)
    continued = learning_rate_schedule(hparams, steps_before=3000)
    rates = [float(continued(step)) for step in range(0, 2000, 10)]
    rewarm = continued.rewarm_steps
    assert 0 < rewarm < hparams.warmup_steps  # no second warm-up to the peak
    assert float(continued(0)) < float(continued(rewarm)) / 10  # it rises from near zero
    # ... to where the first run's schedule stood at its step 3,000 (without its cooldown)
    uncooled = dataclasses.replace(hparams, cooldown_fraction=0.0)
    assert float(continued(rewarm - 1)) == pytest.approx(
        float(learning_rate_schedule(uncooled)(3000 + rewarm - 1)), rel=1e-5)
    assert max(rates) < 0.5 * peak_learning_rate(hparams)
    assert max(float(fresh(step)) for step in range(0, 2000, 10)) == pytest.approx(
        peak_learning_rate(hparams), rel=0.01)
    assert float(continued(1999)) < 0.01 * max(rates)  # and cools down as a fresh run does
    # the alternative kept for measuring the choice: a second warm-up, as a fresh run's
    restarted = learning_rate_schedule(dataclasses.replace(hparams, continued_schedule="restart"),
                                       steps_before=3000)
    assert [float(restarted(s)) for s in range(0, 2000, 10)] == [
        float(fresh(s)) for s in range(0, 2000, 10)]


def test_a_total_tail_cools_a_continued_run_down_as_long_as_one_long_run_would():
    """continued_tail "total": the cooldown and the weight average span their fractions of all
    the steps behind the model and this run's, at most this run's; "run": of this run's."""
    hparams = dataclasses.replace(hparams_lib.get_profile("cpu"), train_steps=1000,
                                  cooldown_fraction=0.2, continued_tail="run")
    own = learning_rate_schedule(hparams, steps_before=1500)
    total = learning_rate_schedule(dataclasses.replace(hparams, continued_tail="total"),
                                   steps_before=1500)
    assert (own.cooldown_steps, total.cooldown_steps) == (200, 500)  # 0.2 x 2,500
    for schedule, cooldown in ((own, 200), (total, 500)):
        start = 1000 - cooldown  # the optimizer's steps count from 0: the cooldown's first is
        assert float(schedule(start - 1)) == pytest.approx(  # the paper's rate up to there
            float(learning_rate_schedule(dataclasses.replace(hparams, cooldown_fraction=0.0),
                                         steps_before=1500)(start - 1)), rel=1e-5)
        assert float(schedule(start + cooldown // 2)) < 0.6 * float(schedule(start - 1))
    assert optimization.cooldown_steps(0.25, 1000, 9000) == 1000  # at most this run's
    assert dataclasses.replace(hparams, continued_tail="total").tail_steps_before(1500) == 1500
    assert hparams.tail_steps_before(1500) == 0
    with pytest.raises(ValueError, match="continued_tail must be 'run' or 'total'"):
        dataclasses.replace(hparams, continued_tail="all")
    # a budget fixes the last step before that longer tail begins
    # (0.125 s per step: 801 steps in the 100 s; a tail of 0.2 x 2,301 = 460 starts after 341)
    total_tail, own_tail = (budget.TimeBudget(100.0, started=0.0, cooldown_fraction=0.2,
                                              tail_before=before) for before in (1500, 0))
    for time_budget in (total_tail, own_tail):
        time_budget.observe(1, now=0.0)
    assert total_tail.decide(339, now=338 * 0.125) == 0
    assert total_tail.decide(340, now=339 * 0.125) == 801
    assert own_tail.decide(340, now=339 * 0.125) == 0  # its tail of 160 is far off


def test_a_total_tail_averages_as_many_weights_as_one_long_run_would():
    """The weight average of a continued run with continued_tail "total": its fraction of all
    the steps behind the model and this run's 20 (at most these 20), here all of them."""
    counts = []
    for tail_before in (0, 60):
        model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        average = callbacks.WeightAverage(model.trainable_variables,
                                          tf.Variable(20, dtype=tf.int64), 0.25, tail_before)
        model.fit(tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat(),
                  epochs=1, steps_per_epoch=20, verbose=0, callbacks=[average])
        counts.append(average.apply())
    assert counts == [5, 20]  # 0.25 x 20; 0.25 x 80


def _fit(model: keras.Model, steps: int, feedback: list) -> None:
    model.fit(tf.data.Dataset.from_tensors((np.ones([4, 2]), np.ones([4, 1]))).repeat(),
              epochs=1, steps_per_epoch=steps, verbose=0, callbacks=feedback)


def _adam_model() -> keras.Model:
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_the_training_state_is_saved_where_the_cooldown_begins_and_restored_with_its_moments(
        tmp_path):
    """TrainingState saves the weights and the optimizer at the cooldown's first step (a
    quarter of 20: step 15); restore_training_state puts both into a new model and counts its
    steps from 0."""
    model = _adam_model()
    seen = {}
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: seen.update(
        {int(model.optimizer.iterations.numpy()): (
            model.get_weights(), [v.numpy() for v in model.optimizer.variables[1:]])}))
    state = callbacks.TrainingState(training.training_state(model),
                                    str(tmp_path / TRAINING_STATE),
                                    tf.Variable(20, dtype=tf.int64), 0.25)
    assert state.fork_step() == 15
    _fit(model, 20, [record, state])
    assert callbacks.saved_state_step(str(tmp_path / TRAINING_STATE)) == 15
    restored = _adam_model()
    base = _record(vocab_size=DEFAULT_VOCAB_SIZE)
    assert not training.has_training_state(base, str(tmp_path))  # its record names none
    assert training.has_training_state(dataclasses.replace(base, schedule_steps=15),
                                       str(tmp_path))
    training.restore_training_state(restored, str(tmp_path))
    weights, moments = seen[15]  # step 15's, not the last step's
    assert not np.array_equal(weights[0], model.get_weights()[0])
    for mine, theirs in zip(restored.get_weights() + [
            v.numpy() for v in restored.optimizer.variables[1:]], weights + moments):
        np.testing.assert_array_equal(mine, theirs)
    assert len(moments) == 4 and all(np.any(m) for m in moments)  # Adam's m and v, both layers
    assert int(restored.optimizer.iterations.numpy()) == 0
    mismatched = keras.Sequential([keras.layers.Dense(2, input_shape=(2,))])
    mismatched.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    mismatched.optimizer.build(mismatched.trainable_variables)
    with pytest.raises(training.WarmStartError, match="does not fit this model"):
        training.restore_training_state(mismatched, str(tmp_path))


# -- the recipe a continued run trains with ------------------------------------------------------

def _record(**transform) -> training.TrainingRecord:
    base = dataclasses.replace(hparams_lib.get_profile("smoke"), source_vocab_size=90,
                               target_vocab_size=90, shared_embeddings=True, dropout_rate=0.3)
    settings = PipelineConfig(data_path="x").vocabulary_settings
    return training.TrainingRecord(hparams=dataclasses.asdict(base), train_steps=40,
                                   total_train_steps=100, transform={**settings, **transform})


def test_the_base_fixes_the_shape_and_recipe_and_the_run_its_length():
    run = dataclasses.replace(hparams_lib.get_profile("cpu"), train_steps=0, train_minutes=10.0)
    continued = training.continued_hparams(_record(), run, {"precision": "float32",
                                                            "beam_width": 3})
    assert (continued.d_model, continued.num_layers, continued.dropout_rate) == (32, 1, 0.3)
    assert continued.source_vocab_size == 90
    assert (continued.train_minutes, continued.precision) == (10.0, run.precision)
    assert continued.beam_width == 3 and not continued.adapt_recipe
    # A new order of the training pairs, not a replay of the base's first batches.
    assert continued.seed == _record().hparams["seed"] + 100
    with pytest.raises(training.WarmStartError, match=r"d_model=64 \(the base has 32\)"):
        training.continued_hparams(_record(), run, {"d_model": 64})


def test_a_base_trained_on_this_kind_of_machine_gives_its_precision_without_a_probe(caplog):
    """The precision probe of a warm start on the kind of machine its base trained on would
    repeat the base's answer; it is skipped. Another CPU, core count or GPUs, a base whose
    precision its user set, a record from before records named them, or a precision this
    run's user sets: decided anew, as in a fresh run."""
    here = {"gpus": 0, "cpu": "AMD EPYC", "cores": 2, "bfloat16_units": True}
    base = dataclasses.replace(
        _record(), machine=here, auto_precision="mixed_bfloat16",
        hparams={**_record().hparams, "precision": "mixed_bfloat16"})
    assert training.known_precision(base, here) == "mixed_bfloat16"
    assert training.known_precision(base, {**here, "bfloat16_units": False}) is None
    assert training.known_precision(base, {**here, "cores": 32}) is None
    assert training.known_precision(base, {**here, "gpus": 1}) is None
    assert training.known_precision(dataclasses.replace(base, machine={}), here) is None
    # set by hand (mixed_float16 on a CPU: emulated, which auto would never choose) or garbled
    for chosen_by_hand in ("", "auto", "mixed_float32"):
        assert training.known_precision(
            dataclasses.replace(base, auto_precision=chosen_by_hand), here) is None
    record = json.loads(base.to_json())
    assert training.TrainingRecord(**record) == base  # kept in nmt_training.json
    del record["auto_precision"]  # a record from before: decided anew
    assert training.known_precision(training.TrainingRecord(**record), here) is None
    assert devices.machine_kind(gpus=0).keys() == here.keys()

    def no_probe(hparams):
        raise AssertionError("probed")

    run = dataclasses.replace(hparams_lib.get_profile("cpu"), train_minutes=10.0,
                              adapt_recipe=False, precision="auto")
    with caplog.at_level(logging.INFO, logger="trainer_module.budget"):
        plan = budget.make_plan(run, no_probe, tf.distribute.get_strategy(), lambda: 600.0,
                                gpus=0, known_precision="mixed_bfloat16")
    assert plan.precision == "mixed_bfloat16"
    assert "the base model's, which trained on this kind of machine, so no probe" in caplog.text
    # the user's precision wins over the base's
    assert budget.make_plan(run, no_probe, tf.distribute.get_strategy(), lambda: 600.0,
                            overrides={"precision": "float32"}, gpus=0,
                            known_precision="mixed_bfloat16").precision == "float32"


# -- which served model a run continues, decided before anything runs ----------------------------

def _serve(serving_dir: str, version: int, record: training.TrainingRecord | None,
           vocabulary: bytes = b"a\n##b\n") -> str:
    """A served version's files as AtomicPusher leaves them (SavedModel, assets, record)."""
    path = os.path.join(serving_dir, str(version))
    os.makedirs(os.path.join(path, "assets"))
    open(os.path.join(path, "saved_model.pb"), "wb").close()
    for name, content in (("joint_vocab", vocabulary), ("joint_vocab.model", b"model")):
        with open(os.path.join(path, "assets", name), "wb") as f:
            f.write(content)
    if record:
        training.write_record(path, record)
    return path


def test_nothing_served_trains_from_scratch(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config = PipelineConfig(data_path="x", pipeline_root=str(tmp_path), profile="smoke")
    planned = warm_start.plan(config, fresh_if_incompatible=False)
    # the first model of a chain: ServedModel finds nothing, Transform learns a vocabulary
    assert (planned.warm_start, planned.warm_start_version) == (True, 0)
    assert "nothing is served under" in caplog.text and "from scratch" in caplog.text
    assert served_assets(config.serving_dir) is None


def test_the_newest_version_is_continued_and_transform_finds_its_vocabulary(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    config = PipelineConfig(data_path="x", pipeline_root=str(tmp_path), profile="smoke")
    _serve(config.serving_dir, 100, _record())
    _serve(config.serving_dir, 200, dataclasses.replace(_record(), total_train_steps=140))
    os.makedirs(os.path.join(config.serving_dir, "300", "assets"))  # still being pushed
    planned = warm_start.plan(config, fresh_if_incompatible=False)
    assert (planned.warm_start, planned.warm_start_version) == (True, 200)
    assert "continues from served version 200 (140 training steps behind it)" in caplog.text
    # on Kubeflow Transform is told the serving directory: the newest version when it runs
    assert served_assets(config.serving_dir) == os.path.join(config.serving_dir, "200",
                                                             "assets")
    # here, the version this run continues: Transform's cache key names it
    told = pipeline_arguments(planned)["transform_config"]["served_vocabulary"]
    assert told == os.path.join(config.serving_dir, "200")
    assert served_assets(told) == os.path.join(config.serving_dir, "200", "assets")


@pytest.mark.parametrize("change, says", [
    (dict(vocab_size=1000), f"vocab_size 1000 (the base's: {DEFAULT_VOCAB_SIZE})"),
    (dict(tokenizer="wordpiece"), "tokenizer is wordpiece, and only a SentencePiece"),
    (dict(split_elisions=False), "split_elisions False (the base's: True)"),
    (dict(hparams={"d_model": 64}), "d_model=64 (the base has 32)"),
])
def test_a_run_that_cannot_continue_says_why_or_starts_fresh_if_asked(tmp_path, caplog, change,
                                                                      says):
    caplog.set_level(logging.INFO)
    config = dataclasses.replace(
        PipelineConfig(data_path="x", pipeline_root=str(tmp_path), profile="smoke"), **change)
    _serve(config.serving_dir, 100, _record())
    with pytest.raises(training.WarmStartError) as error:
        warm_start.plan(config, fresh_if_incompatible=False)
    assert says in str(error.value) and "--fresh-if-incompatible" in str(error.value)
    assert str(error.value).count("without --warm-start") == 0  # one piece of advice
    assert warm_start.plan(config, fresh_if_incompatible=True) == config
    assert "trains from scratch (--fresh-if-incompatible)" in caplog.text


def test_a_model_exported_before_records_cannot_be_continued(tmp_path):
    config = PipelineConfig(data_path="x", pipeline_root=str(tmp_path), profile="smoke")
    _serve(config.serving_dir, 100, None)
    with pytest.raises(training.WarmStartError, match="exported before warm starts existed"):
        warm_start.plan(config, fresh_if_incompatible=False)


def test_transform_keeps_a_served_sentencepiece_vocabulary_byte_for_byte(tmp_path):
    rows = [{"english": [f"I see {n} cats."], "french": [f"Je vois {n} chats."]}
            for n in ("two", "three", "many", "no")] * 5
    learned = analyze_in_memory(rows, {"tokenizer": "sentencepiece", "vocab_size": 40})
    vocabulary = learned.vocabulary_file_by_name("joint_vocab")
    serving = tmp_path / "serving"
    assets = serving / "7" / "assets"
    assets.mkdir(parents=True)
    (serving / "7" / "saved_model.pb").write_bytes(b"")
    for suffix in ("", ".model"):
        tf.io.gfile.copy(vocabulary + suffix, str(assets / ("joint_vocab" + suffix)))
    other = [{"english": ["Completely different words here."],
              "french": ["Des mots tout à fait autres."]}] * 3
    kept = analyze_in_memory(other, {"tokenizer": "sentencepiece", "vocab_size": 40,
                                     "served_vocabulary": str(serving)})
    for suffix in ("", ".model"):
        with open(kept.vocabulary_file_by_name("joint_vocab") + suffix, "rb") as a, \
                open(vocabulary + suffix, "rb") as b:
            assert a.read() == b.read()
    pinned = analyze_in_memory(other, {"tokenizer": "sentencepiece", "vocab_size": 40,
                                       "served_vocabulary": str(serving / "7")})  # nmt run's
    with open(pinned.vocabulary_file_by_name("joint_vocab"), "rb") as a, \
            open(vocabulary, "rb") as b:
        assert a.read() == b.read()
    with pytest.raises(ValueError, match="served_vocabulary"):
        analyze_in_memory(other, {"tokenizer": "word", "served_vocabulary": str(serving)})
    # a served model without a SentencePiece model file (on Kubeflow nothing checked before)
    os.remove(assets / "joint_vocab.model")
    with pytest.raises(ValueError, match=rf"Cannot keep the served vocabulary: {assets} has no "
                                         r"joint_vocab.model"):
        analyze_in_memory(other, {"tokenizer": "sentencepiece", "vocab_size": 40,
                                  "served_vocabulary": str(serving)})


def test_the_trainer_refuses_a_base_whose_vocabulary_is_not_transforms(tmp_path):
    """The last guard that every id means the base's piece: the vocabulary files themselves."""
    rows = [{"english": [f"I see {n} cats."], "french": [f"Je vois {n} chats."]}
            for n in ("two", "three", "many", "no")] * 5
    output = analyze_in_memory(rows, {"tokenizer": "sentencepiece", "vocab_size": 40})
    with open(output.vocabulary_file_by_name("joint_vocab"), "rb") as f:
        vocabulary = f.read()
    same = _serve(str(tmp_path), 5, _record(), vocabulary)
    assert task._base(same, output, _record().transform).total_train_steps == 100
    other = _serve(str(tmp_path), 6, _record(), vocabulary + b"one more piece\n")
    with pytest.raises(training.WarmStartError, match=r"Transform's vocabulary joint_vocab is "
                                                      r"not the served model's"):
        task._base(other, output, _record().transform)


def test_the_trainer_refuses_a_base_that_tokenized_otherwise(tmp_path):
    """On Kubeflow the base is found when the run gets there: the Trainer checks it."""
    path = _serve(str(tmp_path), 5, _record())
    mine = {**_record().transform, "whole_numbers": False}
    with pytest.raises(training.WarmStartError, match=r"whole_numbers False \(the base's: True\)"):
        task._base(path, None, mine)


# -- two runs of the pipeline, the second warm-started -------------------------------------------

@dataclasses.dataclass(frozen=True)
class Chain:
    root: str
    first: str  # stderr of each run
    second: str
    version: str  # the first run's pushed version


@pytest.fixture(scope="module")
def chain(nmt_pipeline, fra_sample, tmp_path_factory) -> Chain:
    """A first run that pushes, then one warm-started from it up to the Trainer (what comes
    after is a fresh run's, tested elsewhere)."""
    root = str(tmp_path_factory.mktemp("warm"))
    first = nmt_pipeline(*smoke_args(fra_sample, root, FIRST_STEPS)[1:], "--warm-start")
    assert first.returncode == 0, first.stderr[-5000:]
    second = nmt_pipeline(*smoke_args(fra_sample, root, SECOND_STEPS)[1:], "--warm-start",
                          "--hparam", f"keep_checkpoints={KEPT}", "--to", "Trainer")
    assert second.returncode == 0, second.stderr[-5000:]
    [version] = versions(root)
    return Chain(root, first.stderr, second.stderr, version)


def _histories(root: str) -> list[list[dict]]:
    """Each Trainer's history, oldest first."""
    directory = os.path.join(root, "Trainer", "model_run")
    histories = []
    for run in sorted(os.listdir(directory), key=int):
        with open(os.path.join(directory, run, HISTORY_FILE), encoding="utf-8") as f:
            histories.append(json.load(f))
    return histories


def test_the_second_run_continues_the_first_runs_model(chain):
    assert "nothing is served under" in chain.first and "from scratch" in chain.first
    assert (f"Warm start: training continues from served version {chain.version} "
            f"({FIRST_STEPS} training steps behind it), its vocabulary kept.") in chain.second
    # the data is unchanged: ExampleGen and StatisticsGen are reused; Transform runs again, as
    # its setting names the version it keeps the vocabulary of; the Trainer trains on from the
    # served model
    for component, state in (("FraTxtExampleGen", "cached"), ("StatisticsGen", "cached"),
                             ("Transform", "executed"), ("ServedModel", "executed"),
                             ("Trainer", "executed")):
        assert re.search(rf"{component} +[\d.]+ s  {state}", chain.second), component
    # from the first run's training state (the smoke profile has no cooldown: its last step's),
    # shipped with the served version, its schedule going on from there
    served = os.path.join(chain.root, "serving", "nmt-fra-eng", chain.version)
    assert training.read_record(served).schedule_steps == FIRST_STEPS
    assert callbacks.saved_state_step(os.path.join(served, TRAINING_STATE)) == FIRST_STEPS
    assert "Starting from the base model's training state before its cooldown" in chain.second
    record = training.read_record(os.path.join(_second_model(chain.root).uri, "Format-Serving"))
    assert record.schedule_steps == FIRST_STEPS + SECOND_STEPS
    first, second = _histories(chain.root)
    # its first steps' loss is where the first run ended, far below a fresh start's
    assert second[0]["loss"] < first[0]["loss"] - 1.0
    assert second[0]["loss"] < first[-1]["loss"] + 0.2


def _second_model(root: str):
    return latest_artifact(open_store(root), "Model", "Trainer")


def test_the_vocabulary_is_the_base_models_byte_for_byte(chain):
    served = os.path.join(chain.root, "serving", "nmt-fra-eng", chain.version, "assets")
    trained = os.path.join(_second_model(chain.root).uri, "Format-Serving", "assets")
    for name in ("joint_vocab", "joint_vocab.model"):
        with open(os.path.join(served, name), "rb") as a, \
                open(os.path.join(trained, name), "rb") as b:
            assert a.read() == b.read(), name


def test_the_record_names_the_machine_and_no_precision_auto_did_not_choose(chain):
    """The smoke profile sets float32: a later `auto` run on this machine still probes."""
    record = training.read_record(os.path.join(_second_model(chain.root).uri, "Format-Serving"))
    assert record.machine == devices.machine_kind()
    assert record.hparams["precision"] == "float32" and record.auto_precision == ""


def test_lineage_and_models_show_the_chain_and_its_total_steps(chain):
    model = _second_model(chain.root)
    lineage = run_nmt("metadata", "lineage", str(model.id), "--pipeline-root", chain.root,
                      "--json")
    assert lineage.returncode == 0, lineage.stderr
    result = json.loads(lineage.stdout)
    assert [m["total_train_steps"] for m in result["models"]] == [
        FIRST_STEPS + SECOND_STEPS, FIRST_STEPS]
    # the base: the first run's push, reached through the served version it recorded
    served = [n for n in result["chain"] if n["producer"] == "ServedModel"]
    assert served and served[0]["properties"]["served_version"] == chain.version
    pushed = [n for n in result["chain"] if n["type"] == "PushedModel"]
    assert [p["properties"]["version"] for p in pushed] == [chain.version]
    assert pushed[0]["id"] in served[0]["inputs"]
    models = json.loads(run_nmt("metadata", "models", "--pipeline-root", chain.root,
                                "--json").stdout)
    assert [(m["total_train_steps"], m["pushed_version"]) for m in models] == [
        (FIRST_STEPS + SECOND_STEPS, None), (FIRST_STEPS, chain.version)]


def test_diff_compares_the_trainers_hyperparameters_not_the_bases_copy(chain):
    """The second run's outputs hold two Models: ServedModel's copy of the base (no
    hyperparameters of its own) and the Trainer's, whose --hparam the diff shows."""
    store = open_store(chain.root)
    second, first = (run["run"] for run in list_runs(store))
    changes = diff_runs(store, first, second)["changes"]
    assert {"section": "hyperparameters", "key": "keep_checkpoints", "a": KEPT - 1,
            "b": KEPT} in changes


def test_another_vocabulary_size_fails_before_anything_runs(chain, fra_sample):
    run = run_nmt(*smoke_args(fra_sample, chain.root, 2), "--warm-start", "--vocab-size", "99")
    assert run.returncode == 2, run.stderr[-3000:]
    assert last_line(run.stderr).startswith(
        f"nmt: error: Cannot warm-start from served version {chain.version}: this run's "
        f"vocab_size 99 (the base's: {DEFAULT_VOCAB_SIZE}) would give other pieces")
    assert versions(chain.root) == [chain.version]
    assert "Running pipeline" not in run.stderr
