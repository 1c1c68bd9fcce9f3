"""Config defaults, config files, command-line overrides and their errors."""
import glob
import os

import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.sampling.temperature import TemperatureScheduler

CONFIG_FILES = sorted(p for p in glob.glob(os.path.join(config_lib.config_dir(), "*.py"))
                      if not p.endswith("data_pipeline.py"))


def test_all_config_files_exist():
    names = {os.path.basename(p) for p in CONFIG_FILES}
    expected = {"demo.py"} | {f"qwen3_{m}_{a}.py" for m in ("1p7b", "4b")
                              for a in ("microcoder", "grpo", "dapo")}
    assert expected <= names


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_config_file_builds_rl_config_and_scheduler(path):
    c = config_lib.load_config(path)
    rl = config_lib.make_rl_config(c)
    assert isinstance(rl, RLConfig)
    assert rl.group_size == c.sampling.group_size and rl.total_steps == c.train.steps
    TemperatureScheduler(c.temperature.to_dict())  # the scheduler accepts every knob


@pytest.mark.parametrize("model", ["1p7b", "4b"])
def test_baselines_differ_only_in_algorithm_block(model):
    dicts = {a: config_lib.to_dict(config_lib.load_config(
        os.path.join(config_lib.config_dir(), f"qwen3_{model}_{a}.py"))) for a in ("microcoder", "grpo", "dapo")}
    rls = {a: d.pop("rl") for a, d in dicts.items()}
    assert dicts["microcoder"] == dicts["grpo"] == dicts["dapo"]
    presets = {a: config_lib.make_rl_config(config_lib.load_config(os.path.join(
        config_lib.config_dir(), f"qwen3_{model}_{a}.py"))) for a in rls}
    assert presets["microcoder"].truncation == "conditional" and presets["microcoder"].rho == 0.1
    assert presets["grpo"].kl_beta > 0 and presets["grpo"].aggregation == "seq_mean_token_mean"
    assert presets["dapo"].dynamic_sampling and presets["dapo"].truncation == "soft_overlong"


def test_paper_setting():
    c = config_lib.load_config(os.path.join(config_lib.config_dir(), "qwen3_1p7b_microcoder.py"))
    assert (c.data.num_prompts, c.sampling.group_size, c.sampling.max_new_tokens) == (64, 8, 4096)
    assert c.temperature.temperature == 1.2 and c.eval.max_new_tokens == 8192


def test_overrides_parse_by_type():
    c = config_lib.load_config(None, ["rl.rho=0.2", "train.steps=7", "data.prompt_buckets=(64,128)",
                                      "train.progress=false", "model.path=/x/y", "rl.decay=cosine",
                                      "rl.learning_rate=1"])
    assert c.rl.rho == 0.2 and c.train.steps == 7 and c.data.prompt_buckets == (64, 128)
    assert c.train.progress is False and c.model.path == "/x/y" and c.rl.decay == "cosine"
    assert c.rl.learning_rate == 1.0 and isinstance(c.rl.learning_rate, float)


def test_unknown_key_lists_valid_keys():
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.load_config(None, ["rl.rhoo=0.2"])
    message = str(e.value)
    assert "rl.rhoo" in message and "rl.rho" in message and "train.steps" in message


@pytest.mark.parametrize("override", ["train.steps=abc", "train.progress=maybe", "train=1", "steps"])
def test_bad_overrides_are_errors(override):
    with pytest.raises((config_lib.ConfigError, ValueError)):
        config_lib.load_config(None, [override])


def test_unknown_rl_field_is_an_error():
    c = config_lib.demo_config()
    c.rl.not_a_field = 1
    with pytest.raises(ValueError, match="not_a_field"):
        config_lib.make_rl_config(c)


def test_every_group_is_documented_in_the_table():
    doc = config_lib.__doc__
    for key in config_lib.flat_keys(config_lib.default_config()):
        group = key.split(".")[0]
        assert f"| {group}" in doc or f"| {key}" in doc, key
