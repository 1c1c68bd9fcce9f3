"""mesh.rollout_devices: the rollout worker on devices of its own, the learner on the rest, on 8
fake CPU devices. Quick: the split rule, and the weight transfer's result (the learner's params,
on the worker's shardings and devices). Slow: the demo with k = 0 split 4 + 4 equals it on one
4-device mesh to float rounding (rows and final params)."""

import dataclasses

import jax
import numpy as np
import pytest

from microcoder_jax import models, sharding
from microcoder_jax.trainer import loop as train
from microcoder_jax.trainer import setup
from microcoder_jax.trainer.worker import transfer
from short_demo import short_demo, untimed_rows


def test_split_devices_takes_a_count_or_a_fraction_of_the_first_devices():
    devices = jax.devices()
    assert sharding.split_devices(0, devices) == ([], devices)
    assert sharding.split_devices(3, devices) == (devices[:3], devices[3:])
    assert sharding.split_devices(0.25, devices) == (devices[:2], devices[2:])
    with pytest.raises(ValueError, match="leaves none for the learner"):
        sharding.split_devices(8, devices)


def test_roles_map_to_one_shared_placement_or_to_disjoint_devices():
    shared = sharding.place_roles(sharding.MeshConfig(data=1, fsdp=-1, tensor=1), 0, 2)
    assert shared["rollout"] is shared["learner"] and shared["learner"].mesh.size == 8
    split = sharding.place_roles(sharding.MeshConfig(data=1, fsdp=-1, tensor=1, rollout_devices=2), -1, 2)
    rollout, learner = (set(split[r].mesh.devices.flat) for r in ("rollout", "learner"))
    assert rollout == set(jax.devices()[:2]) and learner == set(jax.devices()[2:]) and len(learner) == 6
    assert set(split["rollout"].sample_mesh.devices.flat) == rollout  # its sampler stays on its devices
    assert split["rollout"].sample_mesh.shape["tensor"] == 2  # decode_tensor -1: the KV heads split
    blank = {f.name: None for f in dataclasses.fields(setup.Run)}  # only the placement and role are read
    run = setup.Run(**{**blank, "placement": split, "role": "learner"})
    assert run.split and run.mesh is split["learner"].mesh
    assert run.as_role("rollout").mesh is split["rollout"].mesh and run.as_role("learner") is run
    with pytest.raises(ValueError, match="unknown role 'judge'"):
        run.as_role("judge")


def test_a_fractional_count_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"mesh.rollout_devices=2.5: a count is a whole number"):
        sharding.MeshConfig(rollout_devices=2.5)


def test_the_transferred_weights_are_the_learners_on_the_workers_shardings():
    mc = models.get_preset("tiny", vocab_size=64, dtype="float32")
    rollout, learner = sharding.split_devices(4, jax.devices())
    lmesh, rmesh = sharding.make_mesh(1, 4, 1, devices=learner), sharding.make_mesh(1, 4, 1, devices=rollout)
    axes, shapes = models.param_logical_axes(mc), models.param_shapes(mc)
    params = jax.device_put(
        models.init_params(mc, jax.random.key(0)), sharding.logical_to_sharding(axes, lmesh, shapes)
    )
    target = sharding.logical_to_sharding(axes, rmesh, shapes)
    moved, nbytes, seconds = transfer(params, target)
    assert nbytes == sum(x.nbytes for x in jax.tree.leaves(params)) and seconds >= 0
    for a, b, sh in zip(jax.tree.leaves(moved), jax.tree.leaves(params), jax.tree.leaves(target), strict=True):
        assert a.sharding == sh and set(a.devices()) <= set(rollout)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the next version replaces that copy leaf by leaf: the old one is freed, the learner's kept
    newer = jax.tree.map(lambda x: x + 1, params)
    again, _, _ = transfer(newer, target, replaces=moved)
    assert all(x.is_deleted() for x in jax.tree.leaves(moved))
    assert not any(x.is_deleted() for x in jax.tree.leaves(newer) + jax.tree.leaves(params))
    for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(newer), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def demo(**overrides):
    return short_demo(3, **{"mesh.fsdp": 4, **overrides})


rows = untimed_rows


@pytest.mark.slow
def test_k0_split_equals_one_mesh_to_float_rounding(tmp_path):
    one = train.train(demo(), str(tmp_path / "one"), log_fn=lambda *a: None)
    split = train.train(demo(**{"mesh.rollout_devices": 4}), str(tmp_path / "split"), log_fn=lambda *a: None)
    a, b = rows(tmp_path / "one"), rows(tmp_path / "split")
    assert [r["step"] for r in b] == [1, 2, 3] and all(r["weights_bytes"] > 0 for r in b)
    for ra, rb in zip(a, b, strict=True):
        for k, v in ra.items():
            if isinstance(v, float):
                np.testing.assert_allclose(rb[k], v, rtol=1e-4, atol=1e-6, err_msg=k)
            else:
                assert rb[k] == v, k
    devices = {d for x in jax.tree.leaves(split.params) for d in x.devices()}
    assert devices == set(jax.devices()[4:])  # the learner's own devices
    for x, y in zip(jax.tree.leaves(one.params), jax.tree.leaves(split.params), strict=True):
        np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_k1_on_split_meshes_samples_a_step_behind_with_moved_weights(tmp_path):
    train.train(
        demo(**{"mesh.rollout_devices": 0.5, "train.off_policy_steps": 1, "rl.is_correction": "tis"}),
        str(tmp_path),
        log_fn=lambda *a: None,
    )
    got = rows(tmp_path)
    assert [r["staleness"] for r in got] == [0, 1, 1]
    assert all(r["weights_bytes"] > 0 and np.isfinite(r["is_weight_mean"]) for r in got)
