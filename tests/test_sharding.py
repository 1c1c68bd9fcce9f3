"""Mesh construction, logical-axis rules, and the same logits on 1, 2x4 and 8 (fake CPU) devices."""

import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from microcoder_jax import sharding as shd
from microcoder_jax.models import (
    DecoderConfig,
    forward,
    get_preset,
    init_cache,
    init_params,
    load_hf_params,
    param_logical_axes,
    param_shapes,
)


def param_shardings(config, mesh):
    """What the model's callers pass sharding.py: the model's logical axes and shapes."""
    return shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config))


CONFIG = get_preset("tiny", dtype="float32", tie_word_embeddings=False, num_kv_heads=2, num_heads=8, head_dim=8)


def test_make_mesh_shapes_and_errors():
    assert dict(shd.make_mesh().shape) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert dict(shd.make_mesh(data=2, fsdp=-1, tensor=2).shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert shd.make_mesh(fsdp=1, devices=jax.devices()[:1]).size == 1
    with pytest.raises(ValueError, match="needs 6 devices"):
        shd.make_mesh(data=3, fsdp=2)
    with pytest.raises(ValueError, match="at most one"):
        shd.make_mesh(data=-1, fsdp=-1)


def test_mesh_sizes_and_the_batch_rows_rule():
    """The one -1 rule (mesh_from_sizes and the planner's abstract mesh) and put_batch's rows rule
    (the planner's abstract batches and per-device rows), on a mesh and on an AbstractMesh."""
    assert shd.mesh_sizes(1, -1, 1, 8) == (1, 8, 1)
    assert shd.mesh_sizes(-1, 3, 1, 8) == (2, 3, 1)  # the rest, rounded down: a mesh on the first 6
    assert shd.mesh_sizes(1, -1, 16, 8) == (1, 1, 16)  # at least 1 (mesh_from_sizes then refuses)
    assert shd.mesh_sizes(2, 2, 2, 8) == (2, 2, 2)
    mesh = shd.make_mesh(data=2, fsdp=2, tensor=2)
    abstract = jax.sharding.AbstractMesh((2, 2, 2), shd.MESH_AXES)
    for m in (mesh, abstract):
        assert shd.batch_shards(m) == 4
        assert shd.rows_split(m, 8) and not shd.rows_split(m, 6)
    assert shd.batch_shards(None) == 1 and shd.rows_split(None, 3)
    placed = shd.put_batch({"split": np.zeros((8, 2)), "whole": np.zeros((6, 2))}, mesh)
    assert placed["split"].sharding.spec == P(("data", "fsdp"), None)
    assert placed["whole"].sharding.spec == P()


def test_logical_rules_and_divisibility_fallback():
    mesh = shd.make_mesh(fsdp=2, tensor=4)
    assert shd.logical_to_spec(("layers", "embed", "heads", "head_dim"), mesh) == P(None, "fsdp", "tensor", None)
    # kv_heads=2 cannot split over tensor=4: replicated instead of an error.
    assert shd.logical_to_spec(("layers", "embed", "kv_heads", "head_dim"), mesh, (2, 64, 2, 16)) == P(
        None, "fsdp", None, None
    )
    # A mesh axis is used once per array: activations split rows, keep the hidden dim whole.
    assert shd.logical_to_spec(("batch", "length", "embed"), mesh, (4, 8, 64)) == P("fsdp", None, None)
    mesh2 = shd.make_mesh(data=2, fsdp=2, tensor=2)
    assert shd.logical_to_spec(("batch", "length"), mesh2, (4, 8)) == P(("data", "fsdp"), None)
    assert shd.logical_to_spec(("batch", "length"), mesh2, (6, 8)) == P("data", None)  # 6 % 4 != 0, 6 % 2 == 0
    assert shd.batch_sharding(mesh2, 3).spec == P(("data", "fsdp"), None, None)


def test_param_shardings_cover_every_param():
    mesh = shd.make_mesh(fsdp=2, tensor=4)
    shardings = param_shardings(CONFIG, mesh)
    assert shardings["layers"]["q_proj"].spec == P(None, "fsdp", "tensor", None)
    assert shardings["layers"]["k_proj"].spec == P(None, "fsdp", None, None)  # 2 kv heads on tensor=4
    assert shardings["lm_head"].spec == P("fsdp", "tensor")
    assert shardings["embed"].spec == P("tensor", "fsdp")


def test_constrain_is_a_no_op_without_a_mesh():
    x = jnp.ones((4, 8))
    assert shd.constrain(x, ("batch", "length")) is x


def _run_on_mesh(params, ids, mask, mesh):
    """Place params/inputs by the rules and run the jitted forward under ``mesh``."""
    sharded = jax.device_put(params, param_shardings(CONFIG, mesh))
    rows = jax.sharding.NamedSharding(mesh, shd.logical_to_spec(("batch", "length"), mesh, ids.shape))
    ids, mask = jax.device_put((jnp.asarray(ids), jnp.asarray(mask)), rows)
    with jax.set_mesh(mesh):
        logits, _ = jax.jit(forward, static_argnums=1)(sharded, CONFIG, ids, attention_mask=mask)
    return logits


@pytest.fixture(scope="module")
def reference():
    params = init_params(CONFIG, jax.random.key(0))
    ids = np.random.RandomState(0).randint(0, CONFIG.vocab_size, (8, 16))
    mask = np.ones_like(ids)
    mask[1, :5] = 0
    mask[6, :11] = 0
    logits, _ = jax.jit(forward, static_argnums=1)(params, CONFIG, jnp.asarray(ids), attention_mask=jnp.asarray(mask))
    return params, ids, mask, np.asarray(logits)


@pytest.mark.parametrize(
    "axes",
    [dict(fsdp=1, devices=jax.devices()[:1]), dict(fsdp=2, tensor=4), dict(data=2, tensor=4), dict(fsdp=8)],
    ids=["1", "fsdp2xtp4", "dp2xtp4", "fsdp8"],
)
def test_same_logits_on_every_mesh(reference, axes):
    params, ids, mask, ref = reference
    mesh = shd.make_mesh(**axes)
    logits = _run_on_mesh(params, ids, mask, mesh)
    np.testing.assert_allclose(np.asarray(logits), ref, rtol=2e-5, atol=2e-5)
    if mesh.size == 8 and dict(mesh.shape)["tensor"] == 4:
        assert logits.sharding.spec[-1] == "tensor"  # the vocab constraint took effect


def test_cached_decode_step_on_a_mesh(reference):
    params, ids, mask, ref = reference
    mesh = shd.make_mesh(fsdp=2, tensor=4)
    sharded = jax.device_put(params, param_shardings(CONFIG, mesh))
    pos = np.maximum(mask.cumsum(-1) - 1, 0)
    cache = init_cache(CONFIG, 8, 16)
    with jax.set_mesh(mesh):
        logits, cache = jax.jit(forward, static_argnums=1)(
            sharded,
            CONFIG,
            jnp.asarray(ids),
            attention_mask=jnp.asarray(mask),
            positions=jnp.asarray(pos),
            cache=cache,
            cache_index=0,
        )
    keep = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(logits)[keep], ref[keep], rtol=2e-5, atol=2e-5)


_WORKER = textwrap.dedent("""
    import os, sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    from microcoder_jax import sharding as shd
    shd.initialize_distributed(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    import jax.numpy as jnp, numpy as np
    from jax.experimental import multihost_utils
    from microcoder_jax.models import forward, get_preset, init_params, param_logical_axes, param_shapes
    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    config = get_preset("tiny", dtype="float32")
    mesh = shd.make_mesh(fsdp=2, tensor=2)
    params = jax.jit(lambda: init_params(config, jax.random.key(0)),
                     out_shardings=shd.logical_to_sharding(param_logical_axes(config), mesh,
                                                           param_shapes(config)))()
    ids = np.arange(4 * 8).reshape(4, 8) % config.vocab_size
    rows = shd.batch_sharding(mesh, 2)
    ids = jax.make_array_from_callback(ids.shape, rows, lambda idx: ids[idx])
    with jax.set_mesh(mesh):
        logits, _ = jax.jit(forward, static_argnums=1)(params, config, ids)
    full = multihost_utils.process_allgather(logits, tiled=True)
    if jax.process_index() == 0:
        np.save(sys.argv[3], np.asarray(full))
    from microcoder_jax.models.hf import save_hf_params
    save_hf_params(params, config, sys.argv[4], max_shard_bytes=50_000)  # gathers across processes
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    gathered = {jax.tree_util.keystr(k): np.asarray(multihost_utils.process_allgather(v, tiled=True)) for k, v in flat}
    if jax.process_index() == 0:
        np.savez(sys.argv[4] + ".npz", **gathered)
""")


@pytest.mark.slow
def test_two_process_distributed_run(tmp_path):
    """Two localhost processes x 2 CPU devices form one 4-device mesh (the multi-host path):
    sharded init, forward, and an HF export that gathers every tensor across the processes."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out, export = tmp_path / "logits.npy", tmp_path / "hf"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, f"127.0.0.1:{port}", str(i), str(out), str(export)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-4000:]
    config = get_preset("tiny", dtype="float32")
    params = init_params(config, jax.random.key(0))
    ids = jnp.asarray(np.arange(4 * 8).reshape(4, 8) % config.vocab_size)
    ref, _ = jax.jit(forward, static_argnums=1)(params, config, ids)
    np.testing.assert_allclose(np.load(out), np.asarray(ref), rtol=2e-5, atol=2e-5)
    exported = jax.tree_util.tree_flatten_with_path(load_hf_params(export, DecoderConfig.from_hf(export)))[0]
    gathered = np.load(str(export) + ".npz")
    for key, value in exported:  # the multi-host export is bitwise the params the processes held
        np.testing.assert_array_equal(np.asarray(value), gathered[jax.tree_util.keystr(key)])


def test_initialize_distributed_single_process_is_a_no_op():
    shd.initialize_distributed(num_processes=1)
    shd.initialize_distributed(mode="never")
    with pytest.raises(ValueError, match="auto, always or never"):
        shd.initialize_distributed(mode="sometimes")
    assert jax.process_count() == 1


def test_sampler_mesh_splits_kv_heads_over_the_same_devices():
    train = shd.make_mesh(data=1, fsdp=8, tensor=1)
    assert shd.sampler_mesh(train, 0, 8) is train and shd.sampler_mesh(None, -1, 8) is None
    for tensor, kv_heads, shape in ((-1, 8, (1, 1, 8)), (-1, 2, (4, 1, 2)), (4, 8, (2, 1, 4)), (-1, 3, (8, 1, 1))):
        mesh = shd.sampler_mesh(train, tensor, kv_heads)
        assert tuple(mesh.shape.values()) == shape and list(mesh.devices.flat) == list(train.devices.flat)
    tp = shd.make_mesh(data=1, fsdp=1, tensor=8)
    assert shd.sampler_mesh(tp, -1, 8) is tp
    with pytest.raises(ValueError, match="sampling.decode_tensor=3: 3 must divide both the 8 devices.*use -1"):
        shd.sampler_mesh(train, 3, 8)
    with pytest.raises(ValueError, match="model's 2 KV heads"):
        shd.sampler_mesh(train, 4, 2)
