"""Checkpoints: exact round trip, keep-N, half-written saves never picked, params-only loading,
resume falling back over damaged checkpoints."""

import jax
import numpy as np
import pytest

from microcoder_jax import models
from microcoder_jax.models.checkpoint import Checkpointer, CheckpointReadError, load_params
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state


@pytest.fixture(scope="module")
def state():
    cfg = models.get_preset("tiny", dtype="float32")
    return init_train_state(models.init_params(cfg, jax.random.PRNGKey(0)), make_rl_config("microcoder"))


def _equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(la, lb)
    )


def _bumped(state, k):
    return state._replace(params=jax.tree.map(lambda p: p + k, state.params), step=state.step + k)


def test_round_trip_is_bitwise_and_keeps_newest(tmp_path, state):
    ck = Checkpointer(str(tmp_path), keep=2, async_save=True)
    for s in (1, 2, 3):
        ck.save(s, _bumped(state, s), {"step": s, "data": {"next_index": 10 * s}})
    ck.wait()
    assert ck.all_steps() == [2, 3]
    restored, meta, step = ck.restore(state)
    assert step == 3 and meta == {"step": 3, "data": {"next_index": 30}}
    assert type(restored) is type(state) and _equal(restored, _bumped(state, 3))
    restored, meta, _ = ck.restore(state, step=2)
    assert meta["step"] == 2 and _equal(restored, _bumped(state, 2))
    ck.close()


def test_half_written_checkpoint_is_never_picked(tmp_path, state):
    ck = Checkpointer(str(tmp_path), keep=3)
    ck.save(1, state, {"step": 1})
    ck.close()
    # What a run killed during the save of step 2 leaves behind: Orbax's temporary directory.
    tmp = tmp_path / "2.orbax-checkpoint-tmp-1234567"
    (tmp / "state").mkdir(parents=True)
    (tmp / "state" / "partial").write_bytes(b"\0" * 10)
    ck = Checkpointer(str(tmp_path), keep=3)
    assert ck.latest_step() == 1
    _, meta, step = ck.restore(state)
    assert step == 1 and meta["step"] == 1
    ck.close()


def test_load_params_reads_only_params(tmp_path, state):
    ck = Checkpointer(str(tmp_path), keep=1)
    ck.save(5, _bumped(state, 5), {"step": 5})
    ck.close()
    params, step = load_params(str(tmp_path), state.params)
    assert step == 5 and _equal(params, _bumped(state, 5).params)


def test_restore_without_checkpoint_is_a_clear_error(tmp_path, state):
    ck = Checkpointer(str(tmp_path / "empty"))
    assert ck.latest_step() is None
    with pytest.raises(FileNotFoundError):
        ck.restore(state)
    ck.close()


def _truncate_largest_file(step_dir):
    """Cut the largest data file of a checkpoint to half, as a full disk or a partial copy leaves it."""
    files = [p for p in step_dir.rglob("*") if p.is_file()]
    largest = max(files, key=lambda p: p.stat().st_size)
    with open(largest, "r+b") as f:
        f.truncate(largest.stat().st_size // 2)


def test_resume_falls_back_over_a_damaged_newest_checkpoint(tmp_path, state):
    ck = Checkpointer(str(tmp_path), keep=3)
    for s in (1, 2, 3):
        ck.save(s, _bumped(state, s), {"step": s})
    ck.close()
    _truncate_largest_file(tmp_path / "3")
    (tmp_path / "4.orbax-checkpoint-tmp-99").mkdir()  # a killed save's leftovers: never read
    lines = []
    ck = Checkpointer(str(tmp_path), keep=3)
    restored, meta, step = ck.restore_readable(state, lines.append)
    assert step == 2 and meta["step"] == 2 and _equal(restored, _bumped(state, 2))
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith(f"checkpoint of step 3 in {tmp_path} cannot be read (") and "trying step 2" in lines[0]
    # set aside: the resumed run can write step 3 again, and the damaged files stay for a look
    assert ck.all_steps() == [1, 2] and (tmp_path / "3.unreadable").is_dir()
    ck.save(3, _bumped(state, 30), {"step": 3})
    ck.wait()
    assert ck.restore(state)[2] == 3
    ck.close()


def test_no_readable_checkpoint_is_one_line_and_never_a_fresh_start(tmp_path, state):
    ck = Checkpointer(str(tmp_path), keep=3)
    for s in (1, 2):
        ck.save(s, _bumped(state, s), {"step": s})
    ck.close()
    for s in (1, 2):
        _truncate_largest_file(tmp_path / str(s))
    lines = []
    ck = Checkpointer(str(tmp_path), keep=3)
    with pytest.raises(CheckpointReadError) as e:
        ck.restore_readable(state, lines.append)
    msg = str(e.value)
    assert "\n" not in msg and "(steps 2, 1; the newest: " in msg and "--workdir" in msg, msg
    assert len(lines) == 2 and "no older checkpoint" in lines[1]
    assert ck.all_steps() == [1, 2]  # nothing moved when nothing could be read
    ck.close()
    assert Checkpointer(str(tmp_path / "fresh")).restore_readable(state) is None  # no checkpoint: a fresh start
