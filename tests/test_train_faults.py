"""Faults a long run meets, through the public `train` CLI on a tiny demo: a damaged newest
checkpoint and a killed save's leftovers, an infinite learning rate, SIGKILL between checkpoints.
Each asserts nothing lost or doubled. One 3-step base run (a checkpoint every step, one optimizer
update per step) is shared; each test resumes a copy of it."""

import os
import shutil
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from microcoder_jax.models.checkpoint import load_params
from microcoder_jax.trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

TINY = [
    "--config.train.checkpoint_every=1",
    "--config.train.progress=false",
    "--config.train.warm_start_steps=5",
    "--config.data.num_prompts=2",
    "--config.sampling.group_size=4",
    "--config.demo.problems_per_op=2",
    "--config.judge.workers=1",
    "--config.rl.num_minibatches=1",
]


def _cmd(workdir, *extra):
    return [
        sys.executable,
        "-m",
        "microcoder_jax.train",
        "--config=configs/demo.py",
        f"--workdir={workdir}",
        *TINY,
        *extra,
    ]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # one CPU device, as a user's run
    return env


def _train(workdir, *extra):
    return subprocess.run(
        _cmd(workdir, *extra),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


def _steps(workdir):
    return [r["step"] for r in read_metrics(os.path.join(workdir, "metrics.jsonl"))]


def _checkpoints(workdir):
    return sorted(os.listdir(os.path.join(workdir, "checkpoints")))


def _params(workdir, step):
    """The params of a checkpoint as numpy arrays."""
    from microcoder_jax import cli, models
    from microcoder_jax.data.tokenizer import load_tokenizer
    from microcoder_jax.models.presets import model_config_from

    c = cli.load_config(None, [a[len("--config.") :] for a in TINY])
    vocab = len(load_tokenizer(os.path.join(workdir, "tokenizer")))
    shapes = jax.eval_shape(lambda: models.init_params(model_config_from(c, vocab), jax.random.PRNGKey(0)))
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, np.float32, sharding=dev), shapes)
    params, got = load_params(os.path.join(workdir, "checkpoints"), target, step)
    assert got == step
    return jax.tree.leaves(jax.tree.map(np.asarray, params))


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished 3-step run, checkpoints 1, 2 and 3."""
    workdir = tmp_path_factory.mktemp("base") / "run"
    done = _train(workdir, "--config.train.steps=3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert _steps(workdir) == [1, 2, 3] and _checkpoints(workdir) == ["1", "2", "3"]
    return workdir


def _copy(base, tmp_path):
    shutil.copytree(base, tmp_path / "run")
    return tmp_path / "run"


def _truncate_largest_file(step_dir):
    files = [os.path.join(d, f) for d, _, names in os.walk(step_dir) for f in names]
    largest = max(files, key=os.path.getsize)
    os.truncate(largest, os.path.getsize(largest) // 2)


@pytest.fixture(scope="module")
def damaged(base, tmp_path_factory):
    """The base run with checkpoint 3 cut to half and a killed save's temporary directory of step 4,
    resumed to step 4."""
    workdir = _copy(base, tmp_path_factory.mktemp("damaged"))
    _truncate_largest_file(workdir / "checkpoints" / "3")
    leftover = workdir / "checkpoints" / "4.orbax-checkpoint-tmp-1733150000"
    (leftover / "state").mkdir(parents=True)
    (leftover / "state" / "manifest.ocdbt").write_bytes(b"\0" * 100)
    return workdir, _train(workdir, "--config.train.steps=4")


def test_damaged_newest_checkpoint_falls_back_to_the_older_one_and_finishes(damaged):
    workdir, done = damaged
    assert done.returncode == 0, done.stderr[-3000:]
    failed = [line for line in done.stdout.splitlines() if "cannot be read" in line]
    assert len(failed) == 1 and failed[0].startswith("checkpoint of step 3 in ") and "trying step 2" in failed[0]
    assert "OUT_OF_RANGE" in failed[0], failed[0]
    assert "resumed from step 2" in done.stdout and "Traceback" not in done.stderr + done.stdout
    assert _steps(workdir) == [1, 2, 3, 4]  # step 3 again, once
    assert _checkpoints(workdir) == ["2", "3", "3.unreadable", "4"]  # keep 3: 2, the new 3 and 4
    assert all(np.isfinite(x).all() for x in _params(workdir, 4))


def test_a_killed_saves_temporary_directory_is_ignored(damaged):
    workdir, done = damaged
    assert done.returncode == 0 and "orbax-checkpoint-tmp" not in done.stdout + done.stderr
    assert not [n for n in _checkpoints(workdir) if "tmp" in n]  # Orbax removes it at start


def test_infinite_learning_rate_is_skipped_counted_and_stops_with_a_good_checkpoint(base, tmp_path):
    workdir = _copy(base, tmp_path)
    before = _params(workdir, 3)
    change = "--config.train.allow_config_change=true"
    blown = _train(
        workdir,
        "--config.train.steps=8",
        "--config.rl.learning_rate=inf",
        change,
        "--config.train.max_nonfinite_steps=2",
    )
    assert blown.returncode == 1, blown.stderr[-3000:]
    last = blown.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 2 consecutive steps (to step 5) had non-finite updates, skipped"), last
    assert "newest checkpoint (step 4) holds finite params" in last and "Traceback" not in blown.stderr
    rows = read_metrics(str(workdir / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["nonfinite_skipped"] for r in rows[3:]] == [1, 1]
    # the skipped step's checkpoint holds step 3's params, bit for bit
    assert all(np.array_equal(a, b) for a, b in zip(before, _params(workdir, 4), strict=True))
    resumed = _train(workdir, "--config.train.steps=6", change)  # back to the run's learning rate
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 4" in resumed.stdout
    rows = read_metrics(str(workdir / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["nonfinite_skipped"] for r in rows[4:]] == [0, 0] and np.isfinite(rows[-1]["loss"])
    assert all(np.isfinite(x).all() for x in _params(workdir, 6))


def test_sigkill_between_checkpoints_then_resume_logs_each_step_once(base, tmp_path):
    workdir = _copy(base, tmp_path)
    args = ["--config.train.steps=8", "--config.train.checkpoint_every=4"]  # checkpoints 4 and 8
    victim = subprocess.Popen(
        _cmd(workdir, *args),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    deadline = time.time() + 600
    while len(_steps(workdir)) < 6:  # past checkpoint 4, before 8
        assert victim.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, "no step 6 within 10 minutes"
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    logged = _steps(workdir)
    done = [int(n) for n in _checkpoints(workdir) if n.isdigit()]
    assert max(done) == 4 and logged[-1] > 4, (done, logged)  # rows past the newest checkpoint
    resumed = _train(workdir, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step 4" in resumed.stdout
    assert _steps(workdir) == list(range(1, 9))
