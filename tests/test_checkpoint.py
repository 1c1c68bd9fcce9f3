"""Checkpoints: exact round trip, keep-N, half-written saves never picked, params-only loading."""

import jax
import numpy as np
import pytest

from microcoder_jax import models
from microcoder_jax.checkpoint import Checkpointer, load_params
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
        for x, y in zip(la, lb))


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
