"""Launch scripts: --help, --dry-run printing every command without running any, the planner's
check before train, and a setup that copies only the code (no runs/, pipeline outputs, .venv, .git)."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU = os.path.join(ROOT, "launch", "tpu_vm.sh")
GPU = os.path.join(ROOT, "launch", "gpu.sh")


@pytest.fixture
def fake_gcloud(tmp_path):
    """A `gcloud` on PATH that records any call: a dry run must never reach it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "gcloud_was_called"
    (bin_dir / "gcloud").write_text(f"#!/bin/sh\ntouch {marker}\n")
    (bin_dir / "gcloud").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        TPU_NAME="mc",
        ZONE="us-central2-b",
        ACCELERATOR="v5litepod-8",
        CONFIG="configs/paper.py:qwen3-1.7b,microcoder",
        WORKDIR="/mnt/runs/x",
        TARBALL=str(tmp_path / "code.tgz"),
    )
    return env, marker


def _run(cmd, env, check=True):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_help_lists_every_command():
    out = _run([TPU, "--help"], os.environ).stdout
    for command in ("create", "setup", "weights", "data", "plan", "train", "logs", "delete", "--dry-run"):
        assert f"  {command}" in out
    assert "MODEL_DIR" in _run([GPU, "--help"], os.environ).stdout


@pytest.mark.parametrize(
    "command", [["create"], ["setup"], ["weights"], ["data", "a.jsonl"], ["plan"], ["train"], ["logs"], ["delete"]]
)
def test_dry_run_prints_commands_and_runs_none(fake_gcloud, command):
    env, marker = fake_gcloud
    out = _run([TPU, "--dry-run", *command], env).stdout
    lines = out.strip().splitlines()
    assert lines and all(line.startswith(("gcloud compute tpus tpu-vm", "(cd ")) for line in lines), out
    assert all("--zone=us-central2-b" in line for line in lines if line.startswith("gcloud"))
    assert not marker.exists() and not os.path.exists(env["TARBALL"])


@pytest.mark.parametrize(
    "accelerator, name, runtime",
    [
        ("v4-8", "v4-8", "tpu-ubuntu2204-base"),
        ("v5p-8", "v5p-8", "v2-alpha-tpuv5"),
        ("v5e-8", "v5litepod-8", "v2-alpha-tpuv5-lite"),
        ("v5litepod-16", "v5litepod-16", "v2-alpha-tpuv5-lite"),
        ("v6e-8", "v6e-8", "v2-alpha-tpuv6e"),
    ],
)
def test_create_picks_the_runtime_for_the_accelerator(fake_gcloud, accelerator, name, runtime):
    env, marker = fake_gcloud
    out = _run([TPU, "--dry-run", "create"], dict(env, ACCELERATOR=accelerator)).stdout
    assert f"--accelerator-type={name} " in out + " " and f"--version={runtime}" in out, out
    mine = _run([TPU, "--dry-run", "create"], dict(env, ACCELERATOR=accelerator, RUNTIME="my-image")).stdout
    assert "--version=my-image" in mine and not marker.exists()


@pytest.mark.parametrize("accelerator", ["v5x-8", "tpu", "v5e"])
def test_an_unknown_accelerator_is_refused_before_gcloud(fake_gcloud, accelerator):
    env, marker = fake_gcloud
    proc = _run([TPU, "create"], dict(env, ACCELERATOR=accelerator), check=False)
    assert proc.returncode == 2 and f"ACCELERATOR={accelerator}" in proc.stderr and "v5e-8" in proc.stderr
    assert not marker.exists()


def test_train_runs_the_planner_first(fake_gcloud):
    env, _ = fake_gcloud
    lines = _run([TPU, "--dry-run", "train"], dict(env, EXTRA="--config.train.steps=5")).stdout.splitlines()
    assert len(lines) == 2
    plan, train = lines
    assert (
        "--worker=0" in plan
        and "python3 -m microcoder_jax.plan --config=configs/paper.py:qwen3-1.7b,microcoder "
        "--topology=v5litepod-8 --config.train.steps=5"
        in plan
    )
    assert "--worker=all" in train and "microcoder_jax.train --config=configs/paper.py:qwen3-1.7b,microcoder" in train
    assert "--workdir=/mnt/runs/x" in train and "--config.train.steps=5" in train
    skipped = _run([TPU, "--dry-run", "train"], dict(env, SKIP_PLAN="1")).stdout.splitlines()
    assert len(skipped) == 1 and "microcoder_jax.train" in skipped[0]


def test_missing_slice_name_is_a_clear_error(fake_gcloud):
    env, _ = fake_gcloud
    env = {k: v for k, v in env.items() if k != "TPU_NAME"}
    proc = _run([TPU, "--dry-run", "create"], env, check=False)
    assert proc.returncode != 0 and "set TPU_NAME" in proc.stderr
    proc = _run([TPU, "frobnicate"], env, check=False)
    assert proc.returncode == 2 and "unknown command" in proc.stderr


def test_setup_copies_only_the_code(tmp_path):
    repo = tmp_path / "repo"
    for rel in (
        "microcoder_jax/train.py",
        "configs/demo.py",
        "README.md",
        "runs/demo/metrics.jsonl",
        "data_pipeline/export/train-0.jsonl",
        ".venv/bin/python",
        "microcoder_jax/__pycache__/x.pyc",
        "notes_uncommitted.md",
    ):
        os.makedirs(os.path.dirname(repo / rel), exist_ok=True)
        (repo / rel).write_text("x")
    os.makedirs(repo / "launch")
    shutil.copy(TPU, repo / "launch" / "tpu_vm.sh")
    shutil.copy(os.path.join(ROOT, ".gitignore"), repo / ".gitignore")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    _run([*git, "init", "-q"], os.environ)
    _run([*git, "add", "microcoder_jax/train.py", "configs", "README.md", "launch", ".gitignore"], os.environ)
    _run([*git, "commit", "-qm", "code"], os.environ)
    files = set(_run([str(repo / "launch" / "tpu_vm.sh"), "files"], os.environ).stdout.split())
    assert files == {
        "microcoder_jax/train.py",
        "configs/demo.py",
        "README.md",
        "launch/tpu_vm.sh",
        ".gitignore",
        "notes_uncommitted.md",
    }


def test_gpu_dry_run_prints_the_train_command(tmp_path):
    env = dict(os.environ, MODEL_DIR="/models/Qwen3-1.7B", DATA="data/train-*.jsonl")
    out = _run([GPU, "--dry-run", "--config.train.steps=3"], env).stdout.splitlines()
    assert out[0].startswith("export XLA_FLAGS=")
    assert out[1] == (
        "python -m microcoder_jax.train '--config=configs/paper.py:qwen3-1.7b,microcoder' "
        "'--workdir=runs/paper_qwen3-1.7b_microcoder' '--config.model.path=/models/Qwen3-1.7B' "
        "'--config.data.train_files=data/train-*.jsonl' '--config.train.steps=3'"
    )
    proc = _run([GPU], {k: v for k, v in os.environ.items() if k != "MODEL_DIR"}, check=False)
    assert proc.returncode != 0 and "set MODEL_DIR" in proc.stderr
