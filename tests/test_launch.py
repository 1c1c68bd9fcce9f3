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


def _fake_gpu_host(tmp_path, gpu="NVIDIA A100-SXM4-80GB, 81920", count=1, plan_exit=0, plan_out=""):
    """`nvidia-smi` (one GPU model, `count` of them) and a `python` that records its arguments and
    answers `-m microcoder_jax.plan` with `plan_out` and `plan_exit` (train: exit 0)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls"
    listing = "\n".join(f"GPU {i}: {gpu.split(',')[0]} (UUID: GPU-{i})" for i in range(count))
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\ncase "$*" in *--query-gpu*) echo "{gpu}" ;; *-L*) printf "{listing}\\n" ;; esac\n'
    )
    (tmp_path / "plan_out").write_text(plan_out)
    (bin_dir / "python").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        f'case "$*" in *microcoder_jax.plan*) cat {tmp_path / "plan_out"}; exit {plan_exit} ;; esac\nexit 0\n'
    )
    for f in ("nvidia-smi", "python"):
        (bin_dir / f).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", MODEL_DIR="/models/Qwen3-1.7B", DATA="train.jsonl")
    return env, calls


def test_gpu_dry_run_plans_then_prints_the_train_command(tmp_path):
    env, calls = _fake_gpu_host(tmp_path, count=2)
    env["DATA"] = "data/train-*.jsonl"
    out = _run([GPU, "--dry-run", "--config.train.steps=3"], env).stdout.splitlines()
    assert out[0] == (
        "python '-m' 'microcoder_jax.plan' '--config=configs/paper.py:qwen3-1.7b,microcoder' "
        "'--topology=a100-80gb' '--hbm-gib=72.0' '--devices=2' '--config.model.path=/models/Qwen3-1.7B' "
        "'--config.train.steps=3'"
    )
    assert out[1].startswith("export XLA_FLAGS=")
    assert out[2] == (
        "python -m microcoder_jax.train '--config=configs/paper.py:qwen3-1.7b,microcoder' "
        "'--workdir=runs/paper_qwen3-1.7b_microcoder' '--config.model.path=/models/Qwen3-1.7B' "
        "'--config.data.train_files=data/train-*.jsonl' '--config.train.steps=3'"
    )
    assert not calls.exists()  # a dry run runs nothing
    proc = _run([GPU], {k: v for k, v in os.environ.items() if k != "MODEL_DIR"}, check=False)
    assert proc.returncode != 0 and "set MODEL_DIR" in proc.stderr


@pytest.mark.parametrize(
    "gpu, where",
    [
        ("NVIDIA H100 80GB HBM3, 81559", "'--topology=h100' '--hbm-gib=71.7'"),  # 0.9 of it: JAX's share
        ("NVIDIA A100-PCIE-40GB, 40960", "'--topology=a100-40gb' '--hbm-gib=36.0'"),
        ("NVIDIA RTX A6000, 49140", "'--hbm-gib=43.2'"),  # a GPU the planner does not name: its memory
    ],
)
def test_gpu_plan_topology_from_nvidia_smi(tmp_path, gpu, where):
    env, _ = _fake_gpu_host(tmp_path, gpu=gpu)
    out = _run([GPU, "--dry-run"], env).stdout.splitlines()
    assert f"{where} '--devices=1'" in out[0], out[0]


def test_gpu_refuses_to_start_when_the_plan_does_not_fit(tmp_path):
    plan_out = (
        "verdict: does not fit 1xa100-80gb: sample admit\n"
        "  suggestion: sample admit: int8 KV pool, 64 slots fits, 70.3 GiB of 74.5 GiB (analytic): "
        "--config.sampling.kv_dtype=int8\n"
        "  suggestion: fits with every change (the analytic model): add --config.sampling.kv_dtype=int8\n"
    )
    env, calls = _fake_gpu_host(tmp_path, plan_exit=1, plan_out=plan_out)
    proc = _run([GPU, "--config.train.steps=3"], env, check=False)
    assert proc.returncode == 1
    assert "verdict: does not fit" in proc.stdout  # the plan is shown
    assert "the planner found flags that fit" in proc.stderr
    assert proc.stderr.strip().endswith("--config.train.steps=3 --config.sampling.kv_dtype=int8"), proc.stderr
    ran = calls.read_text().splitlines()
    assert len(ran) == 1 and "microcoder_jax.plan" in ran[0] and "--config.train.steps=3" in ran[0]  # never trains
    # nothing fits: the planner's own lines explain; the script names the way out
    env, calls = _fake_gpu_host(tmp_path / "b", plan_exit=1, plan_out="  suggestion: x: nothing fits (...)\n")
    proc = _run([GPU], env, check=False)
    assert proc.returncode == 1 and "the plan check failed" in proc.stderr and "SKIP_PLAN=1" in proc.stderr


def test_gpu_trains_after_a_plan_that_fits(tmp_path):
    env, calls = _fake_gpu_host(tmp_path, plan_out="verdict: every program fits 1xa100-80gb\n")
    _run([GPU, "--config.sampling.kv_dtype=int8", "--config.train.steps=3"], env)
    plan, train = calls.read_text().splitlines()
    assert "microcoder_jax.plan" in plan and "--config.sampling.kv_dtype=int8" in plan
    assert train.startswith("-m microcoder_jax.train --config=configs/paper.py:qwen3-1.7b,microcoder")
    assert train.endswith("--config.sampling.kv_dtype=int8 --config.train.steps=3")
    # SKIP_PLAN=1 trains without planning; no GPU and no TOPOLOGY: a clear error
    (tmp_path / "calls").unlink()
    _run([GPU], dict(env, SKIP_PLAN="1"))
    assert calls.read_text().startswith("-m microcoder_jax.train")
    (tmp_path / "bin" / "nvidia-smi").unlink()
    proc = _run([GPU], env, check=False)
    assert proc.returncode == 1 and "set TOPOLOGY" in proc.stderr
