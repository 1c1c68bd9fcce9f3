"""Bringing your own model and problems (issue 46): configs/problems.py through the CLI with a tiny
checkpoint folder and a 3-problem JSONL; every config problem reported at once; "no usable
problems" as one line naming the knobs, with nothing written; the memory check before step 1."""

import json
import os
import subprocess
import sys

import pytest

from microcoder_jax import config as config_lib
from microcoder_jax import train
from microcoder_jax.plan import host
from own_data import write_problems, write_tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "configs", "problems.py")


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    d = tmp_path_factory.mktemp("own")
    return write_tiny_model(d / "model"), write_problems(d / "train.jsonl")


@pytest.mark.slow
def test_problems_config_trains_a_model_folder_on_a_jsonl_from_the_cli(own, tmp_path):
    model, problems = own
    workdir = tmp_path / "run"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "microcoder_jax.train",
            f"--config={CONFIG}",
            f"--config.model.path={model}",
            f"--config.data.train_files={problems}",
            f"--workdir={workdir}",
            "--config.train.steps=1",
            "--config.sampling.max_new_tokens=16",
            "--config.data.prompt_buckets=(256,)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "memory estimate:" in out.stdout and "GiB available" in out.stdout
    rows = [json.loads(line) for line in open(workdir / "metrics.jsonl")]
    assert [r["step"] for r in rows] == [1] and rows[0]["rows"] == 16  # 4 prompts x G=4
    saved = json.load(open(workdir / "config.json"))
    assert saved["train"]["warm_start_steps"] == 0 and saved["data"]["task"] == "problems"


def test_every_config_problem_is_reported_at_once(tmp_path, capsys):
    # the demo config switched to data.task=problems: no files, no tokenizer, a warm start
    code = train.main(["--config.data.task=problems", f"--workdir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert code == 2 and len(lines) == 3, err
    assert "data.train_files" in lines[0] and "tokenizer.path" in lines[1] and "--config.model.path" in lines[1]
    assert "train.warm_start_steps=150" in lines[2] and "--config.train.warm_start_steps=0" in lines[2]
    assert not (tmp_path / "run").exists()


def test_block_values_are_collected_too():
    c = config_lib.demo_config()
    c.sampling.group_size, c.train.steps = 0, -1
    with pytest.raises(config_lib.ConfigError) as e:
        config_lib.validate(c)
    assert "sampling.group_size" in str(e.value) and "train.steps" in str(e.value)


def test_prompts_over_the_cap_are_one_line_naming_the_knobs_and_nothing_is_written(own, tmp_path, capsys):
    model, problems = own
    workdir = tmp_path / "run"
    code = train.main(
        [
            f"--config={CONFIG}",
            f"--config.model.path={model}",
            f"--config.data.train_files={problems}",
            f"--workdir={workdir}",
            "--config.data.max_prompt_tokens=8",
            "--config.data.prompt_buckets=(8,)",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert "no usable problems" in line and "3 prompts over the length cap" in line
    assert "data.max_prompt_tokens" in line and "data.prompt_buckets" in line and "the longest prompt is" in line
    assert not workdir.exists()  # refused before the workdir is made


def test_memory_over_the_available_is_refused_naming_the_knobs(own, tmp_path, capsys, monkeypatch):
    model, problems = own
    monkeypatch.setattr(host, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    args = [
        f"--config={CONFIG}",
        f"--config.model.path={model}",
        f"--config.data.train_files={problems}",
        f"--workdir={tmp_path / 'run'}",
    ]
    assert train.main(args) == 2
    captured = capsys.readouterr()
    assert "memory estimate:" in captured.out
    (line,) = [ln for ln in captured.err.splitlines() if ln.startswith("error: ")]
    for knob in ("data.num_prompts", "sampling.group_size", "sampling.max_new_tokens", "rl.micro_batch_size"):
        assert knob in line
    assert "--config.train.ignore_memory_check=True" in line and not (tmp_path / "run").exists()
    config = config_lib.get_config()
    config.train.ignore_memory_check = True
    host.check(config, log_fn=lambda message: None)  # logged, not refused


def test_the_cpu_margin_refuses_an_estimate_that_only_just_fits(monkeypatch):
    """XLA on a CPU peaks above the planner's model (SmolLM2: 15.4 GiB resident for 11.1
    estimated), so an estimate within the memory but not within it times the margin is refused."""
    from microcoder_jax.blocks import ConfigError

    gib = host.GIB
    monkeypatch.setattr(host, "estimate", lambda config, devices: (10 * gib, "train step"))
    config = config_lib.get_config()
    monkeypatch.setattr(host, "available_bytes", lambda: 12 * gib)
    with pytest.raises(ConfigError, match="CPU margin"):
        host.check(config, log_fn=lambda message: None)
    monkeypatch.setattr(host, "available_bytes", lambda: int(host.CPU_MARGIN * 10 * gib) + gib)
    host.check(config, log_fn=lambda message: None)
