"""replay says when the step it re-ran had no learning signal (every group's rewards equal), and
names saved steps that do: there an equal row proves little. Quick: no run, saved files only."""

import json
import os

import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.trainer import replay


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A run folder with its config.json (G=8) and the rollouts of steps 2 (all 0), 3 (signal), 4 (all 1)."""
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config_lib.to_dict(config_lib.demo_config()), f)
    os.makedirs(tmp_path / "rollouts")
    signal = np.zeros(16, np.float32)
    signal[9] = 1.0  # one group of two has a spread
    for step, rewards in ((2, np.zeros(16, np.float32)), (3, signal), (4, np.ones(16, np.float32))):
        np.savez(tmp_path / "rollouts" / f"step_{step:06d}.npz", rewards=rewards)
        (tmp_path / "rollouts" / f"step_{step:06d}.json").write_text("{}")
    # the re-run itself (a jitted step on a restored state) is test_replay's (slow); here it equals the row
    monkeypatch.setattr(replay, "replay", lambda workdir, step, log_fn=print: ({"step": step, "loss": 0.0}, {}))
    return str(tmp_path)


def test_groups_with_signal(workdir):
    assert replay.groups_with_signal(workdir, 2, 8) == (0, 2, [0.0])
    assert replay.groups_with_signal(workdir, 3, 8) == (1, 2, [0.0, 1.0])


def test_a_step_without_signal_is_named_with_the_steps_that_have_it(workdir, capsys):
    assert replay.main(["--workdir", workdir, "--step", "2"]) == 0
    err = capsys.readouterr().err
    assert "note: step 2 has no learning signal (no group's rewards differ: all 0)" in err
    assert "every advantage is 0" in err and "saved steps with signal: 3" in err
    assert "equals the logged row" in err


def test_a_step_with_signal_has_no_note(workdir, capsys):
    assert replay.main(["--workdir", workdir, "--step", "3"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_a_folder_that_is_no_training_run_is_named(tmp_path, capsys):
    assert replay.main(["--workdir", str(tmp_path), "--step", "2"]) == 2
    assert capsys.readouterr().err == f"error: --workdir={tmp_path}: no config.json; is it a training run?\n"
