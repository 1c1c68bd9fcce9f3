"""A run SIGKILLed after a checkpoint resumes and ends with bitwise the same params as an
uninterrupted run (CPU, same seed): synchronous, and with train.off_policy_steps=1 and two-turn
feedback episodes (a batch of episodes in flight at the kill: saved beside its checkpoint, trained
on once after the resume; test_train_offpolicy resumes a single-turn batch in flight in process).
Subprocesses, a very small config, a checkpoint every step."""

import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from microcoder_jax.models.checkpoint import load_params
from microcoder_jax.trainer.metrics import read_metrics

STEPS = 5
ARGS = [
    f"--config.train.steps={STEPS}",
    "--config.train.checkpoint_every=1",
    "--config.train.warm_start_steps=40",
    "--config.demo.warm_start_batch=8",  # 8 rows a step, not 32: each of the three runs pays it
    "--config.train.progress=false",
    "--config.data.num_prompts=4",
    "--config.demo.problems_per_op=2",
]


def _cmd(workdir, extra=()):
    return [sys.executable, "-m", "microcoder_jax.train", f"--workdir={workdir}", *ARGS, *extra]


def _env():
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)  # one CPU device, as a user's run
    return env


def _final_params(workdir):
    """The params of the run's final checkpoint, as numpy arrays."""
    from microcoder_jax import cli, models
    from microcoder_jax.models.presets import model_config_from
    from microcoder_jax.data.tokenizer import load_tokenizer

    c = cli.load_config(None, [a[len("--config.") :] for a in ARGS])
    vocab = len(load_tokenizer(os.path.join(workdir, "tokenizer")))
    shapes = jax.eval_shape(lambda: models.init_params(model_config_from(c, vocab), jax.random.PRNGKey(0)))
    dev = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, np.float32, sharding=dev), shapes)
    params, step = load_params(os.path.join(workdir, "checkpoints"), target)
    assert step == STEPS
    return jax.tree.map(np.asarray, params)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        (),
        (  # two-turn episodes, one generation batch of them in flight at the kill
            "--config.env.kind=feedback",
            "--config.env.max_turns=2",
            "--config.demo.public_tests=1",
            "--config.train.off_policy_steps=1",
            "--config.rl.is_correction=tis",
        ),
    ],
    ids=["synchronous", "feedback_episodes_off_policy_1"],
)
def test_sigkill_resume_matches_uninterrupted_run_bitwise(tmp_path, extra):
    full, killed = tmp_path / "full", tmp_path / "killed"
    reference = subprocess.Popen(_cmd(full, extra), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    victim = subprocess.Popen(_cmd(killed, extra), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / "checkpoints"
    deadline = time.time() + 600
    while not (ckpt / "2").is_dir():  # a complete (renamed) checkpoint of step 2
        assert victim.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    done = sorted(int(d) for d in os.listdir(ckpt) if d.isdigit())
    assert done and done[-1] < STEPS, f"killed too late to test anything: {done}"

    if extra:  # the batch sampled ahead of the newest checkpoint is on disk beside it
        assert os.listdir(killed / "inflight" / f"step_{done[-1]:08d}"), os.listdir(killed / "inflight")
    resumed = subprocess.run(_cmd(killed, extra), env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from step" in resumed.stdout
    _, err = reference.communicate(timeout=600)
    assert reference.returncode == 0, err[-3000:]

    a, b = _final_params(full), _final_params(killed)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.dtype == y.dtype and np.array_equal(x, y)
    assert [r["step"] for r in read_metrics(str(killed / "metrics.jsonl"))] == list(range(1, STEPS + 1))
    ref = {r["step"]: r["reward_mean"] for r in read_metrics(str(full / "metrics.jsonl"))}
    got = {r["step"]: r["reward_mean"] for r in read_metrics(str(killed / "metrics.jsonl"))}
    assert ref == got
