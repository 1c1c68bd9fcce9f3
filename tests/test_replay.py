"""One short demo run with rollouts saved, W&B offline and the compile cache on: the replay of a
saved step equals the logged step bitwise on CPU (and a changed batch does not); the offline W&B
run holds the run's rows and config; every row has the throughput and cost keys."""

import glob
import json
import os
import sys

import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax.trainer import loop, replay
from microcoder_jax.trainer.metrics import read_metrics

pytestmark = pytest.mark.slow  # one 3-step demo run (~2-3 min on 2 busy cores) shared by the module
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("demo"))
    c = config_lib.demo_config()
    c.train.steps, c.train.progress, c.train.checkpoint_every = 3, False, 0
    c.train.warm_start_steps = 30  # a format the judge can run sometimes: tests get counted
    c.train.save_rollouts, c.train.save_rollouts_every = (2,), 3
    c.wandb.mode, c.wandb.project = "offline", "mc-replay-test"
    loop.train(c, workdir, log_fn=lambda *a: None)
    return workdir


def test_replay_equals_the_logged_step_bitwise(demo_run, capsys):
    assert replay.saved_steps(demo_run) == [2, 3]
    logged = {r["step"]: r for r in read_metrics(os.path.join(demo_run, "metrics.jsonl"))}
    row, diffs = replay.replay(demo_run, 2, log_fn=lambda *a: None)
    assert diffs == {}
    compared = [k for k in logged[2] if not replay.is_timed(k)]
    assert len(compared) > 40 and all(row[k] == logged[2][k] for k in compared)
    assert isinstance(row["loss"], float) and row["loss"] == logged[2]["loss"]
    assert row["grad_norm"] == logged[2]["grad_norm"]
    assert replay.main(["--workdir", demo_run, "--step", "3"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out.strip().splitlines()[-1])
    assert printed["step"] == 3 and printed["loss"] == logged[3]["loss"] and "equals the logged row" in err


def test_a_changed_batch_replays_differently(demo_run, capsys):
    npz = os.path.join(demo_run, "rollouts", "step_000002.npz")
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    original = dict(arrays)
    arrays["rewards"] = arrays["rewards"].copy()
    arrays["rewards"][::8] = 1.0 - arrays["rewards"][::8]  # one verdict per group flipped: other advantages
    np.savez(npz, **arrays)
    try:
        assert replay.main(["--workdir", demo_run, "--step", "2"]) == 1
        err = capsys.readouterr().err
        assert "loss: logged" in err and "keys differ from the logged row" in err
    finally:
        np.savez(npz, **original)


def test_a_step_without_a_saved_rollout_is_one_error_line(demo_run, capsys):
    assert replay.main(["--workdir", demo_run, "--step", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --step=1: no saved rollout") and "saved steps: 2, 3" in err[0]


def test_bad_save_rollouts_value_is_one_error_line(tmp_path, capsys):
    workdir = tmp_path / "run"
    assert loop.main(["--config.train.save_rollouts=(0,)", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.save_rollouts=(0,): expected steps, ints >= 1" in err[0] and not workdir.exists()


def test_rows_carry_throughput_and_cost(demo_run):
    rows = read_metrics(os.path.join(demo_run, "metrics.jsonl"))
    for r in rows:
        assert r["gen_tokens"] == r["judge_programs"] * r["response_length_mean"]  # one generation batch
        assert r["throughput/gen_tokens_per_s"] > 0 and r["throughput/train_tokens_per_s"] > 0
        shares = [r[f"share/{k}"] for k in ("sample", "judge", "train", "other")]
        assert all(0 <= s <= 1 for s in shares) and abs(sum(shares) - 1) < 1e-9
        assert r["cost/chip_s"] == pytest.approx(8 * r["time_step_s"])  # the 8 fake CPU devices
    assert sum(r["judge_tests"] for r in rows) > 0
    assert os.listdir(os.path.join(demo_run, "compile_cache"))  # the default: under the workdir


def test_the_offline_wandb_run_holds_the_rows_and_the_config(demo_run):
    from test_wandb import history_and_config

    run_id = open(os.path.join(demo_run, "wandb_run_id")).read().strip()
    (run_dir,) = glob.glob(os.path.join(demo_run, "wandb", f"offline-run-*-{run_id}"))
    history, config = history_and_config(run_dir)
    for r in read_metrics(os.path.join(demo_run, "metrics.jsonl")):
        assert history[r["step"]]["reward_mean"] == r["reward_mean"] and history[r["step"]]["loss"] == r["loss"]
    assert config["train"]["steps"] == 3 and config["train"]["save_rollouts"] == [2]
    assert config["rl_resolved"]["group_size"] == 8


def test_planner_reads_the_runs_lengths_and_compares(demo_run, capsys):
    """`plan --lengths=run:WORKDIR --compare` on this CPU demo run: the lengths come from its
    metrics.jsonl, and its measured times are printed beside the plan, marked not comparable."""
    from microcoder_jax.plan import lengths
    from microcoder_jax.plan.__main__ import main as plan_main

    profile = lengths.parse(f"run:{demo_run}")
    rows = read_metrics(os.path.join(demo_run, "metrics.jsonl"))
    assert profile.run["steps"] == len(rows) == 3
    assert profile.run["response_length_mean"] == pytest.approx(np.mean([r["response_length_mean"] for r in rows]))
    assert profile.run["prompt_length_mean"] > 0 and 0 < profile.response_mean < 1
    demo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "demo.py")
    assert (
        plan_main(["--config", demo, "--topology", "h100", "--devices", "1", f"--lengths=run:{demo_run}", "--compare"])
        == 0
    )
    text = capsys.readouterr().out.split("== planned vs measured")[1]
    assert f"{np.mean([r['time_step_s'] for r in rows]):.2f}" in text and "not comparable" in text
