"""Signals: SIGTERM to a running demo-sized train finishes the step, writes a checkpoint, closes
the pool and exits 143 with a one-line message; a second SIGINT exits at once (130)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.trainer.metrics import read_metrics
from microcoder_jax.trainer.preemption import Guard, Preempted

TINY = [
    "--config.train.steps=1000",
    "--config.train.checkpoint_every=0",
    "--config.train.progress=false",
    "--config.train.warm_start_steps=5",
    "--config.data.num_prompts=2",
    "--config.sampling.group_size=4",
    "--config.demo.problems_per_op=2",
    "--config.judge.workers=1",
]


# the run's final checkpoint close signals the run itself: a second SIGINT while closing, every time
SIGNAL_WHILE_CLOSING = """
import os, signal, sys, time
from microcoder_jax.trainer import loop as train
close = train.Checkpointer.close
def close_after_a_second_sigint(self):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)
    close(self)
train.Checkpointer.close = close_after_a_second_sigint
sys.exit(train.main(sys.argv[1:]))
"""


def _start(workdir, *, script=None):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    entry = ["-c", script] if script else ["-m", "microcoder_jax.train"]
    return subprocess.Popen(
        [sys.executable, *entry, "--workdir", str(workdir), *TINY],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_step(proc, workdir, step):
    deadline = time.time() + 300
    path = os.path.join(workdir, "metrics.jsonl")
    while not (os.path.exists(path) and len(read_metrics(path)) >= step):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "no RL step within 5 minutes"
        time.sleep(0.2)


def _children(pid):
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_143(tmp_path):
    proc = _start(tmp_path)
    _wait_for_step(proc, tmp_path, 2)
    pool = _children(proc.pid)  # the judge pool's server(s)
    assert pool
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    time.sleep(0.5)
    assert not [p for p in pool if os.path.exists(f"/proc/{p}") and "zombie" not in open(f"/proc/{p}/status").read()]
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("stopped by SIGTERM after step ") and "rerun the same command" in last, err[-2000:]
    assert "Traceback" not in err
    step = int(last.split("after step ")[1].split(";")[0])
    ck = Checkpointer(str(tmp_path / "checkpoints"))
    assert ck.latest_step() == step >= 2
    assert ck.read_meta()["step"] == step
    ck.close()
    assert len(read_metrics(str(tmp_path / "metrics.jsonl"))) == step


@pytest.mark.slow
def test_second_sigint_exits_at_once(tmp_path):
    """A first SIGINT during training, the second while the run closes its final checkpoint (the
    window where the guard used to be gone already): 130 at once, no traceback."""
    proc = _start(tmp_path, script=SIGNAL_WHILE_CLOSING)
    _wait_for_step(proc, tmp_path, 1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=25)  # well before the 30 s the patched close would sleep
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    assert "second SIGINT: exiting now" in err and "Traceback" not in err, err[-3000:]


def test_guard_sets_the_flag_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    messages = []
    with Guard(messages.append) as guard:
        assert not guard.requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.requested and guard.signum == signal.SIGTERM
        stop = guard.stop(7, "/runs/x/checkpoints")
    assert signal.getsignal(signal.SIGTERM) is before
    assert isinstance(stop, Preempted) and stop.exit_code == 143 and "\n" not in str(stop)
    assert "after step 7" in str(stop) and "SIGTERM received" in messages[0]


def _signal_during_set_up(workdir, signum, marker):
    """Start the train command, send `signum` once `marker` shows on its stderr (the warm start's
    bar appears just before its first compile), return (exit status, stderr)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "microcoder_jax.train", f"--workdir={workdir}", "--config.judge.workers=1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err, deadline = b"", time.time() + 120
    while marker not in err:  # tqdm writes '\r', not lines: read what is there
        chunk = os.read(proc.stderr.fileno(), 4096)
        assert chunk and time.time() < deadline, (proc.poll(), err.decode()[-3000:])
        err += chunk
    proc.send_signal(signum)
    _, rest = proc.communicate(timeout=60)
    return proc.returncode, (err + rest).decode(errors="replace")


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)], ids=["SIGINT", "SIGTERM"]
)
def test_a_signal_during_set_up_exits_in_one_line(tmp_path, signum):
    """Before the first RL step (here: while the warm start compiles) a signal used to end in a
    SIGSEGV and a core dump (SIGINT: XLA's compile thread outliving the interpreter) or absl's
    stack trace (SIGTERM). Now: one line, status 128 + signum."""
    code, err = _signal_during_set_up(tmp_path / "run", signum, b"warm start")
    assert code == 128 + signum, err[-3000:]
    for bad in ("Traceback", "Fatal Python error", "Segmentation", "SIGSEGV", "core", "stack trace"):
        assert bad not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert (
        last
        == f"{signal.Signals(signum).name} received during set-up, before the first RL step: nothing to save; exiting"
    )
