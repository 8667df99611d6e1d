"""The Trainer's settings: one object from the CLIs to run_fn, each profile with its threshold."""
from __future__ import annotations

import dataclasses
import json

import pytest

from pipeline import config as config_lib
from trainer_module.hparams import PROFILES, get_profile
from trainer_module.settings import SettingsError, TrainerSettings


def test_settings_round_trip_through_the_trainer_config(tmp_path):
    config = config_lib.PipelineConfig(
        data_path=str(tmp_path / "fra.txt"), pipeline_root=str(tmp_path), profile="cpu_2h",
        train_minutes=45.0, precision="float32", hparams={"dropout_rate": 0.2})
    trainer_config = config_lib.pipeline_arguments(config)["trainer_config"]
    settings = TrainerSettings.from_config(json.loads(json.dumps(trainer_config)))
    assert settings == config.trainer_settings and settings.to_config() == trainer_config
    assert settings.gate_profile == "cpu_2h" and settings.checkpoint_root == config.checkpoint_root
    hparams = settings.hparams_for()
    assert (hparams.train_minutes, hparams.dropout_rate, hparams.precision) == (45.0, 0.2,
                                                                               "float32")
    exact = settings.hparams_for(train_steps=300)
    assert (exact.train_steps, exact.train_minutes, exact.checkpoint_every) == (300, 0.0, 300)


def test_each_profile_carries_its_bleu_threshold():
    assert {name: p.min_bleu for name, p in PROFILES.items()} == {
        "smoke": 0.0, "cpu": 10.0, "cpu_2h": 10.0, "base": 25.0, "seeds": 0.0}
    arguments = config_lib.pipeline_arguments(config_lib.PipelineConfig(
        data_path="fra.txt", pipeline_root="root", profile="base"))
    assert arguments["min_bleu"] == 25.0  # the Evaluator's gate
    assert TrainerSettings(profile="base", min_bleu=3.0).bleu_threshold == 3.0


@pytest.mark.parametrize("config, message", [
    ({"profile": "huge"}, "unknown hyperparameter profile 'huge'"),
    ({"hparams": {"dropout": 0.1}}, "--hparam takes NAME=VALUE"),
    ({"hparams": {"num_layers": "two"}}, "--hparam num_layers takes an integer"),
    ({"precision": "fp8"}, "precision must be one of float32"),
    ({"train_minutes": -5}, "train_minutes must be > 0"),
    ({"hparams": {"min_bleu": 99}}, "--hparam takes NAME=VALUE"),  # --min-bleu sets it
])
def test_bad_settings_fail_with_one_line_naming_the_setting(config, message):
    with pytest.raises(SettingsError, match=message) as err:
        TrainerSettings.from_config(config)
    assert "\n" not in str(err.value)


def test_unknown_keys_are_not_settings():
    """Vertex AI's training arguments share the Trainer's custom_config."""
    settings = TrainerSettings.from_config({"profile": "smoke", "ai_platform_training_args": {}})
    assert settings == TrainerSettings(profile="smoke")


def test_the_trainer_defaults_to_the_same_profile_as_nmt_run():
    assert TrainerSettings().profile == config_lib.PipelineConfig.profile == "cpu"
    assert dataclasses.replace(get_profile("cpu"), train_minutes=120.0) == get_profile("cpu_2h")
