"""A checkpoint that cannot be written (disk full, file-size limit) stops the run with one line at
the first failed save, and the last good checkpoint stays intact and restorable."""

import errno
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from microcoder_jax.models.checkpoint import Checkpointer, CheckpointWriteError

# A real write failure: after step 1, files may not grow past 50 kB (EFBIG, like a full disk).
_SCRIPT = textwrap.dedent("""
    import resource, signal, sys
    import jax
    from microcoder_jax.models.checkpoint import Checkpointer, CheckpointWriteError
    ck = Checkpointer(sys.argv[1], keep=3, async_save=True)
    state = {"w": jax.random.normal(jax.random.PRNGKey(0), (300_000,))}  # 1.2 MB, incompressible
    ck.save(1, state, {"step": 1})
    ck.wait()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, resource.RLIM_INFINITY))
    try:
        ck.save(2, state, {"step": 2})
        for _ in range(200):  # the loop polls once per step
            ck.poll()
            import time; time.sleep(0.05)
        ck.save(3, state, {"step": 3})
        ck.wait()
    except CheckpointWriteError as e:
        print(e, file=sys.stderr)
        ck.close()
        sys.exit(1)
    print("no error", file=sys.stderr)
""")


def test_failed_background_write_is_one_line_and_keeps_the_last_good_checkpoint(tmp_path):
    directory = str(tmp_path / "checkpoints")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, directory], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert "checkpoint of step 2" in lines[0] and "File too large" in lines[0]
    assert "newest complete checkpoint is step 1" in lines[0] and "rerun" in lines[0]
    ck = Checkpointer(directory)
    assert ck.latest_step() == 1
    target = {
        "w": jax.ShapeDtypeStruct((300_000,), np.float32, sharding=jax.sharding.SingleDeviceSharding(jax.devices()[0]))
    }
    state, meta, step = ck.restore(target)
    expected = jax.random.normal(jax.random.PRNGKey(0), (300_000,))
    assert step == 1 and meta == {"step": 1} and np.array_equal(np.asarray(state["w"]), np.asarray(expected))
    ck.close()


def test_synchronous_write_failure_names_the_cause_and_the_fix(tmp_path):
    ck = Checkpointer(str(tmp_path / "c"), async_save=False)
    ck.save(1, {"w": np.ones(4, np.float32)}, {"step": 1})

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    ck.manager.save = disk_full
    with pytest.raises(CheckpointWriteError) as e:
        ck.save(2, {"w": np.ones(4, np.float32)}, {"step": 2})
    msg = str(e.value)
    assert "\n" not in msg and "step 2" in msg and "No space left on device" in msg
    assert "step 1 (intact)" in msg and "--workdir" in msg
    ck.close()  # the reported failure is not raised a second time


def test_only_orbax_coroutines_are_dropped_from_unraisable_reports():
    """After a failed restore the process drops the tracebacks of Orbax's abandoned read coroutines
    whenever they are finalised, and nothing else."""
    import types

    from microcoder_jax.models import checkpoint

    def coroutine_from(filename):
        scope: dict = {}
        exec(compile("async def read():\n    return 1\n", filename, "exec"), scope)
        return scope["read"]()

    ours, theirs = coroutine_from("/x/site-packages/orbax/checkpoint/s.py"), coroutine_from("/x/mine/s.py")
    try:
        assert checkpoint._from_orbax(types.SimpleNamespace(object=ours))
        assert not checkpoint._from_orbax(types.SimpleNamespace(object=theirs))
        assert not checkpoint._from_orbax(types.SimpleNamespace(object=None))
    finally:
        ours.close()
        theirs.close()


@pytest.fixture(scope="module")
def run_4_8(tmp_path_factory):
    """A demo-shaped workdir with checkpoints at steps 4 and 8 (random params, no training)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from demo_workdir import make_demo_workdir

    workdir = str(tmp_path_factory.mktemp("run"))
    make_demo_workdir(workdir, steps=(4, 8))
    return workdir


def _one_line(capsys, code, expected_code):
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected_code and len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def test_eval_of_a_pruned_step_lists_the_kept_ones(run_4_8, capsys):
    """`eval --step=7` on a run that kept steps 4 and 8: one line, not Orbax's traceback."""
    from microcoder_jax.trainer.evaluation import main as eval_main

    line = _one_line(capsys, eval_main([f"--checkpoint={run_4_8}", "--step=7"]), 2)
    assert line.startswith("error: --step=7: no checkpoint of step 7 in ") and "kept steps: 4, 8" in line, line


def test_convert_of_a_pruned_step_lists_the_kept_ones(run_4_8, tmp_path, capsys):
    from microcoder_jax.convert import main as convert_main

    line = _one_line(capsys, convert_main(["--from", run_4_8, "--to-hf", str(tmp_path / "hf"), "--step", "7"]), 1)
    assert line.startswith("convert: error: no checkpoint of step 7 in ") and "kept steps: 4, 8" in line, line
    assert not os.path.exists(tmp_path / "hf")


def test_replay_errors_are_one_line_with_what_exists(run_4_8, tmp_path, capsys):
    from microcoder_jax.trainer import replay

    line = _one_line(capsys, replay.main(["--workdir", str(tmp_path / "nope"), "--step", "3"]), 2)
    assert line == f"error: --workdir={tmp_path / 'nope'}: no such folder; pass a training run's --workdir"
    line = _one_line(capsys, replay.main(["--workdir", run_4_8, "--step", "3"]), 2)
    assert line.startswith("error: --step=3: no saved rollout in ") and "(none saved); set train.save_rollouts" in line
    os.makedirs(os.path.join(run_4_8, "rollouts"))  # the batch of step 3 but not the state it starts from
    for suffix in (".npz", ".json"):
        with open(replay._base(run_4_8, 3) + suffix, "w") as f:
            f.write("{}")
    line = _one_line(capsys, replay.main(["--workdir", run_4_8, "--step", "3"]), 2)
    assert "the state it starts from (after step 2) is missing" in line and "state saved: none" in line, line
