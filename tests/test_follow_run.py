"""Following a run (issue 46): in a log file (output not a terminal) one plain line per
train.log_every steps instead of tqdm's carriage returns, and a closing summary saying how the
reward moved, where the files are and the commands for plots, evaluation and TensorBoard."""

import json
import os
import subprocess
import sys

import pytest

from microcoder_jax.trainer.metrics import run_summary, step_line
from short_demo import short_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cli_overrides(config, keys) -> list[str]:
    """short_demo's values of `keys` as --config.KEY=VALUE flags (the same run through the CLI)."""
    out = []
    for key in keys:
        group, name = key.split(".")
        out.append(f"--config.{key}={config[group][name]!r}")
    return out


@pytest.mark.slow
def test_piped_run_logs_a_line_per_step_and_ends_with_a_summary(tmp_path):
    workdir = tmp_path / "run"
    keys = ("train.steps", "train.checkpoint_every", "train.warm_start_steps", "data.num_prompts")
    flags = _cli_overrides(short_demo(2), keys) + ["--config.train.tensorboard=False"]
    out = subprocess.run(
        [sys.executable, "-m", "microcoder_jax.train", f"--workdir={workdir}", *flags],
        cwd=ROOT,
        capture_output=True,  # pipes: not a terminal
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    steps = [ln for ln in lines if ln.startswith("step ")]
    assert [ln.split(":")[0] for ln in steps] == ["step 1/2", "step 2/2"], out.stdout
    for key in ("reward", "pass", "len", "trunc", "T", " s"):
        assert key in steps[0]
    assert "\r" not in out.stdout + out.stderr  # no progress bar in a log file
    summary = lines[lines.index(f"done: {workdir}") :]
    text = "\n".join(summary)
    assert "reward " in summary[1] and "(step 1) ->" in summary[1] and "(step 2)" in summary[1]
    assert f"python -m microcoder_jax.plot --workdir {workdir}" in text
    assert "python -m microcoder_jax.eval --config.train.steps=2" in text and f"--checkpoint={workdir}" in text
    assert "checkpoints" in text and "(steps 2)" in text
    assert not (workdir / "tensorboard").exists() and "tensorboard --logdir" not in text  # tensorboard=False


def test_step_line_is_one_plain_line():
    record = {
        "reward_mean": 0.25,
        "pass_rate": 0.125,
        "response_length_mean": 26.04,
        "truncation_rate": 0.0,
        "temperature": 1.0,
        "time_step_s": 3.21,
    }
    assert step_line(7, 50, record) == "step 7/50: reward 0.250  pass 0.125  len 26.0  trunc 0.000  T 1  3.2 s"
    assert step_line(1, 2, {}) == "step 1/2: reward -  pass -  len -  trunc -  T -  - s"


def test_summary_names_the_first_and_last_steps_eval_and_files(tmp_path):
    rows = [{"step": s, "reward_mean": s / 10, "pass_rate": s / 20} for s in range(1, 11)]
    rows += [{"step": 0, "eval_pass@1": 0.2}, {"step": 10, "eval_pass@1": 0.4}]
    with open(tmp_path / "metrics.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "eval").mkdir()
    (tmp_path / "tensorboard").mkdir()
    lines = run_summary(str(tmp_path), evaluate="python -m microcoder_jax.eval --checkpoint=W", checkpoints=(8, 10))
    assert lines[0] == f"done: {tmp_path}"
    assert lines[1] == "  reward 0.300 (steps 1-5) -> 0.800 (steps 6-10); pass rate 0.150 -> 0.400"
    assert lines[2] == "  held-out pass@1 0.200 (step 0) -> 0.400 (step 10)"
    text = "\n".join(lines)
    assert "(steps 8, 10)" in text and "eval/step_N.json" in text and "tensorboard --logdir" in text
    assert "python -m microcoder_jax.eval --checkpoint=W" in text
