"""Off a TPU VM, loading libtpu prints nothing: the planner's AOT topology and a train CLI start."""

import importlib.util
import os
import subprocess
import sys

import pytest

from microcoder_jax.sharding import NO_TPU_HOST, tpu_chips_here

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOISE = ("Failed to find host bounds", "TPU_ACCELERATOR_TYPE", "common_lib.cc", "worker hostname", "E0000")
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None or tpu_chips_here() != 0,
    reason="needs libtpu installed on a machine without TPU chips",
)


def _env(**extra):
    """This environment without the test harness's JAX settings or a libtpu host description."""
    env = {k: v for k, v in os.environ.items() if k not in NO_TPU_HOST and k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
    return {**env, "PYTHONPATH": ROOT, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1", **extra}


def _assert_quiet(out):
    assert out.returncode == 0, out.stderr[-2000:]
    noisy = [ln for ln in out.stderr.splitlines() if any(n in ln for n in NOISE)]
    assert not noisy, noisy


def test_planner_topology_loads_libtpu_quietly():
    """The planner's libtpu load (Topology.devices), as under `plan` with JAX_PLATFORMS=cpu."""
    code = (
        "from microcoder_jax.plan.topologies import parse_topology; "
        "print(len(parse_topology('v5e-1').devices()), len(parse_topology('v4-8').devices()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=_env(JAX_PLATFORMS="cpu"),
    )
    _assert_quiet(out)
    assert out.stdout.split() == ["1", "4"]


def test_libtpu_noise_is_real_without_the_host_description():
    """The check above can fail: the same load with the variables cleared is noisy on this machine."""
    code = "from jax.experimental import topologies as t; t.get_topology_desc(topology_name='v5e:2x2', platform='tpu')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=_env(JAX_PLATFORMS="cpu"),
    )
    assert any(n in out.stderr for n in NOISE), out.stderr[-2000:]


@pytest.mark.slow
def test_train_cli_start_is_quiet_when_jax_tries_every_backend(tmp_path):
    """JAX_PLATFORMS unset: JAX initialises the TPU plugin (libtpu) too; a zero-step run prints no noise."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "microcoder_jax.train",
            f"--workdir={tmp_path / 'run'}",
            "--config.train.steps=0",
            "--config.train.warm_start_steps=0",
            "--config.train.progress=False",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env=_env(),
    )
    _assert_quiet(out)


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    sys.path.insert(0, os.path.dirname(__file__))
    from demo_workdir import make_demo_workdir

    workdir = str(tmp_path_factory.mktemp("run"))
    make_demo_workdir(workdir, steps=(2,))
    return workdir


def _cli(*args, timeout=300):
    """A `python -m microcoder_jax.<name>` command with JAX_PLATFORMS unset (every backend tried)."""
    return subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout, env=_env()
    )


def test_convert_loads_libtpu_quietly(demo_workdir, tmp_path):
    out = _cli("microcoder_jax.convert", "--from", demo_workdir, "--to-hf", str(tmp_path / "hf"))
    _assert_quiet(out)
    assert "wrote" in out.stdout


def test_replay_loads_libtpu_quietly(demo_workdir):
    """The replay of a step whose starting state was not saved: set-up runs (JAX's backends load),
    then the one error line, and nothing from libtpu."""
    os.makedirs(os.path.join(demo_workdir, "rollouts"), exist_ok=True)
    for suffix in ("npz", "json"):
        with open(os.path.join(demo_workdir, "rollouts", f"step_000003.{suffix}"), "w") as f:
            f.write("{}")
    out = _cli("microcoder_jax.replay", "--workdir", demo_workdir, "--step", "3")
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert "the state it starts from (after step 2) is missing" in lines[0], lines
