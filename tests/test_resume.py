"""Resuming with a changed config: shape changes are refused, algorithm changes need the flag and
are logged, free changes pass, and config.json keeps the original values in its history."""

import json
import os

import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.trainer import resume


def _demo():
    return config_lib.to_dict(config_lib.demo_config())


def _fake_checkpoint(workdir):
    os.makedirs(os.path.join(workdir, "checkpoints", "10"))


def test_identical_config_has_no_changes():
    assert resume.check_config(_demo(), _demo(), allow_change=False) == []


def test_model_shape_change_is_refused_listing_the_keys():
    new = _demo()
    new["model"]["hidden_size"] = 128
    new["model"]["num_layers"] = 4
    new["rl"]["rho"] = 0.3
    with pytest.raises(resume.ConfigChangeError) as e:
        resume.check_config(_demo(), new, allow_change=True)  # the flag cannot unlock a shape change
    msg = str(e.value)
    assert "model.hidden_size: 64 -> 128" in msg and "model.num_layers: 2 -> 4" in msg
    assert "rl.rho" not in msg and "--workdir" in msg


@pytest.mark.parametrize(
    "key,value",
    [
        ("model.vocab_size", 1000),
        ("model.param_dtype", "bfloat16"),
        ("tokenizer.path", "/elsewhere"),
        ("data.task", "problems"),
    ],
)
def test_vocabulary_and_state_layout_changes_are_fatal(key, value):
    new = _demo()
    group, name = key.split(".")
    new[group][name] = value
    with pytest.raises(resume.ConfigChangeError, match=key.replace(".", r"\.")):
        resume.check_config(_demo(), new, allow_change=True)


def test_algorithm_change_needs_the_flag():
    new = _demo()
    new["rl"]["rho"] = 0.3
    new["data"]["num_prompts"] = 8
    with pytest.raises(resume.ConfigChangeError) as e:
        resume.check_config(_demo(), new, allow_change=False)
    assert "rl.rho: 0.1 (None: the preset's) -> 0.3" in str(e.value) and "data.num_prompts: 16 -> 8" in str(e.value)
    assert "--config.train.allow_config_change=True" in str(e.value)
    changes = resume.check_config(_demo(), new, allow_change=True)
    assert {c["key"]: c["kind"] for c in changes} == {"data.num_prompts": "algorithm", "rl.rho": "algorithm"}


def test_a_knob_newer_than_the_run_is_no_change_at_its_default():
    """A run saved before a knob existed resumes when the knob is at its default (the old
    behaviour), and not silently when it is set to something else."""
    old = _demo()
    del old["sampling"]["top_k"]  # as if config.json predates the knob
    assert resume.check_config(old, _demo(), allow_change=False) == []
    new = _demo()
    new["sampling"]["top_k"] = 5
    with pytest.raises(resume.ConfigChangeError, match="sampling.top_k"):
        resume.check_config(old, new, allow_change=False)


def test_schedule_and_hardware_changes_are_free():
    new = _demo()
    new["train"]["steps"] = 200
    new["train"]["checkpoint_every"] = 5
    new["mesh"]["fsdp"] = 4
    new["judge"]["workers"] = 16
    new["eval"]["samples"] = 4
    kinds = {c["key"]: c["kind"] for c in resume.check_config(_demo(), new, allow_change=False)}
    assert set(kinds.values()) == {"free"} and len(kinds) == 5


def test_more_steps_with_a_decaying_learning_rate_is_an_algorithm_change():
    saved, new = _demo(), _demo()
    saved["rl"]["decay"] = new["rl"]["decay"] = "cosine"
    new["train"]["steps"] = 200
    with pytest.raises(resume.ConfigChangeError, match="train.steps"):
        resume.check_config(saved, new, allow_change=False)


def test_fresh_run_writes_config_without_checking(tmp_path):
    new = _demo()
    new["model"]["hidden_size"] = 128
    (tmp_path / "config.json").write_text(json.dumps(_demo()))  # a run killed before its first checkpoint
    assert resume.record_config(str(tmp_path), new, log_fn=lambda m: None) == []
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model"]["hidden_size"] == 128 and saved["_history"] == []


def test_refused_resume_leaves_config_json_untouched(tmp_path):
    resume.record_config(str(tmp_path), _demo(), log_fn=lambda m: None)
    _fake_checkpoint(tmp_path)
    before = (tmp_path / "config.json").read_text()
    new = _demo()
    new["model"]["num_heads"] = 8
    with pytest.raises(resume.ConfigChangeError):
        resume.record_config(str(tmp_path), new, log_fn=lambda m: None)
    assert (tmp_path / "config.json").read_text() == before


def test_allowed_changes_are_logged_and_the_original_survives(tmp_path):
    workdir = str(tmp_path)
    resume.record_config(workdir, _demo(), log_fn=lambda m: None)
    _fake_checkpoint(tmp_path)
    second, logs = _demo(), []
    second["rl"]["rho"] = 0.3
    second["train"]["allow_config_change"] = True
    resume.record_config(workdir, second, log_fn=logs.append)
    third = json.loads(json.dumps(second))
    third["rl"]["rho"] = 0.5
    third["train"]["steps"] = 80
    resume.record_config(workdir, third, log_fn=logs.append)
    assert any("rl.rho: 0.1 (None: the preset's) -> 0.3" in line and "algorithm" in line for line in logs)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["rl"]["rho"] == 0.5 and len(saved["_history"]) == 2
    original = resume.original_config(saved)
    assert original == resume.flatten(_demo())  # the flag key did not exist at first either


def test_train_cli_refuses_a_shape_change_before_writing(tmp_path, capsys):
    from microcoder_jax.trainer import loop as train

    workdir = str(tmp_path)
    resume.record_config(workdir, _demo(), log_fn=lambda m: None)
    _fake_checkpoint(tmp_path)
    before = sorted(os.listdir(workdir)), (tmp_path / "config.json").read_text()
    code = train.main(["--workdir", workdir, "--config.model.hidden_size=128"])
    assert code == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "model.hidden_size: 64 -> 128" in err
    assert (sorted(os.listdir(workdir)), (tmp_path / "config.json").read_text()) == before


def test_a_none_rl_key_set_to_the_presets_own_value_is_no_algorithm_change():
    new = _demo()
    new["rl"]["rho"] = 0.1  # what None resolved to under the microcoder preset
    (change,) = resume.check_config(_demo(), new, allow_change=False)
    assert change["kind"] == "free" and resume.describe_change(change) == "rl.rho: 0.1 (None: the preset's) -> 0.1"


def test_the_train_command_refuses_a_resume_showing_the_presets_values(tmp_path, capsys):
    """`train --config.rl.rho=0.3` on a run that used the preset's rho (0.1): both sides are the
    values the run would use, not the config's None."""
    from microcoder_jax.trainer.loop import main as train_main

    resume.record_config(str(tmp_path), _demo(), log_fn=lambda m: None)
    _fake_checkpoint(tmp_path)
    code = train_main([f"--workdir={tmp_path}", "--config.rl.rho=0.3", "--config.rl.eps_high=0.3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: the config differs from the run's saved config.json"), err
    assert "  rl.eps_high: 0.28 (None: the preset's) -> 0.3\n" in err, err
    assert "  rl.rho: 0.1 (None: the preset's) -> 0.3\n" in err and "Traceback" not in err, err
