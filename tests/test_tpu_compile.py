"""The programs users run compile for real TPU topologies (libtpu AOT; nothing is allocated).

For `v5e:2x2` and `v4:2x2x1`, on a mesh with both an FSDP and a tensor axis: sampler prefill and
decode (whose loop must gather no weights), the log-prob pass (attention=auto falls back to XLA
at head_dim 16), and the train step with attention=auto at 128-multiples, which picks the Pallas
flash kernel and so needs its shard_map. One compile per program and topology, tiny shapes;
every input is a `jax.ShapeDtypeStruct` with its sharding.
"""

import functools
import os
import re

import pytest

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # pytest-xdist workers each load libtpu

try:
    import libtpu  # noqa: F401
except ImportError:
    pytest.skip(
        "libtpu is not installed: pip install -e '.[test]' installs it (TPU AOT compiles run on any CPU)",
        allow_module_level=True,
    )

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402

from hlo_utils import loop_all_gathers  # noqa: E402
from microcoder_jax import sharding as shd  # noqa: E402
from microcoder_jax.models import attention as attn_lib  # noqa: E402
from microcoder_jax.models import get_preset, init_params, param_logical_axes, param_shapes  # noqa: E402
from microcoder_jax.rl.logprobs import compute_logprobs  # noqa: E402
from microcoder_jax.rl.presets import make_rl_config  # noqa: E402
from microcoder_jax.rl.step import TrainState, make_optimizer, make_train_step, state_shardings  # noqa: E402
from microcoder_jax.sampling import static_sampler as sampler  # noqa: E402

TOPOLOGIES = ("v5e:2x2", "v4:2x2x1")
TINY = get_preset("tiny", dtype="bfloat16")  # head_dim 16: attention=auto takes the XLA path
KERNEL_TINY = TINY.replace(num_heads=4, num_kv_heads=2, head_dim=128)  # 128-multiples: the flash kernel


def _spec(shape, dtype, sharding):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


def _rows(mesh, shape, dtype):
    return _spec(shape, dtype, shd.batch_sharding(mesh, len(shape)))


def compile_sampler(config, mesh, prompts: int, samples: int, width: int, max_new: int, phases: int = 4):
    """The compiled (prefill, decode) programs of `sampler.generate` for these static shapes."""
    params, rows = sampler.decode_param_specs(config, mesh), prompts * samples
    ids = _rows(mesh, (prompts, width), jnp.int32)
    key = jax.eval_shape(lambda: jax.random.key(0))
    rep = shd.replicated(mesh)
    with jax.set_mesh(mesh):
        prefill = sampler.prefill.lower(params, ids, ids, config=config, num_samples=samples).compile()
        cache, logits = jax.eval_shape(
            functools.partial(sampler.prefill, config=config, num_samples=samples), params, ids, ids
        )
        cache = jax.tree.map(lambda s, sh: _spec(s.shape, s.dtype, sh), cache, prefill.output_shardings[0])
        logits = _spec(logits.shape, logits.dtype, prefill.output_shardings[1])
        decode = sampler.decode.lower(
            params,
            cache,
            logits,
            ids,
            _rows(mesh, (rows,), jnp.float32),
            _rows(mesh, (rows,), jnp.float32),
            _rows(mesh, (rows,), jnp.int32),
            _spec((8,), jnp.int32, rep),
            _spec((), jnp.int32, rep),
            _spec(key.shape, key.dtype, rep),
            config=config,
            max_new_tokens=max_new,
            phases=phases,
        ).compile()
    return prefill, decode


def compile_logprobs(config, mesh, rows: int, seq: int, micro_batch: int):
    params = _stored_param_specs(config, mesh)
    with jax.set_mesh(mesh):
        return compute_logprobs.jitted.lower(
            params,
            config,
            _rows(mesh, (rows, seq), jnp.int32),
            _rows(mesh, (rows, seq), jnp.int32),
            _rows(mesh, (rows,), jnp.float32),
            micro_batch=micro_batch,
        ).compile()


def compile_train_step(config, mesh, rows: int, seq: int, packed_rows: int = 0, **rl_overrides):
    """The compiled `rl.step.make_train_step` program for a rollout batch of rows x seq tokens
    (`packed_rows` > 0: packed into that many rows of seq tokens, rl.packing)."""
    rl = make_rl_config("microcoder", **rl_overrides)
    sh = state_shardings(config, rl, mesh)
    params = jax.eval_shape(lambda: init_params(config.replace(param_dtype="float32"), jax.random.key(0)))
    abstract = TrainState(
        params,
        jax.eval_shape(make_optimizer(rl).init, params),
        jax.ShapeDtypeStruct((), jnp.int32),
        jax.eval_shape(lambda: jax.random.PRNGKey(0)),
    )
    state = jax.tree.map(lambda s, sh: _spec(s.shape, s.dtype, sh), abstract, sh)
    batch = {k: _rows(mesh, (rows, seq), jnp.int32) for k in ("tokens", "attention_mask", "response_mask")}
    batch |= {k: _rows(mesh, (rows,), jnp.float32) for k in ("rewards", "temperature")}
    batch |= {k: _rows(mesh, (rows,), bool) for k in ("passed", "no_code", "truncated")}
    batch["response_lengths"] = _rows(mesh, (rows,), jnp.int32)
    batch["old_logprobs"] = _rows(mesh, (rows, seq), jnp.float32)  # the learner's, computed before the step
    if packed_rows:
        from microcoder_jax.rl.packing import Packing

        batch["packing"] = Packing(*(_rows(mesh, (packed_rows, seq), jnp.int32) for _ in range(3)))
    step = make_train_step(config, rl, mesh)
    with jax.set_mesh(mesh):
        return step.jitted.lower(state, batch).compile()


def _stored_param_specs(config, mesh):
    shapes = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    shardings = shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config))
    return jax.tree.map(lambda s, sh: _spec(s.shape, s.dtype, sh), shapes, shardings)


def _mosaic_calls(hlo: str) -> int:
    return len(re.findall(r'custom_call_target="tpu_custom_call"', hlo))


@pytest.fixture(scope="module", params=TOPOLOGIES)
def mesh(request):
    devices = topologies.get_topology_desc(topology_name=request.param, platform="tpu").devices
    return shd.make_mesh(fsdp=-1, tensor=2, devices=devices)


def test_sampler_compiles_and_its_decode_loop_gathers_no_weights(mesh):
    """Decode weights come in the decode layout: a loop all-gather may only move per-row scalars.

    (Before DecodingParams, the FSDP-sharded weights were gathered inside every decode step: 41
    all-gathers per loop body of this program on v5e:2x2, each a weight or a hidden-size vector.)
    """
    prefill, decode = compile_sampler(TINY, mesh, prompts=4, samples=2, width=32, max_new=16)
    for program in (prefill, decode):
        memory = program.memory_analysis()
        assert memory.argument_size_in_bytes > 0 and memory.temp_size_in_bytes >= 0
    gathers = loop_all_gathers(decode.as_text())
    assert gathers, "the decode program should contain while loops (the HLO parser found none)"
    too_big = [g for g in gathers if g[1] >= TINY.hidden_size]
    assert not too_big, f"decode loop all-gathers weights or activations: {too_big[:5]}"


def test_logprob_pass_compiles_with_the_xla_attention_fallback(mesh):
    with jax.set_mesh(mesh):
        assert attn_lib.choose("auto", cached=False, seq_len=64, head_dim=16) == "xla"
    program = compile_logprobs(TINY, mesh, rows=8, seq=64, micro_batch=4)
    assert _mosaic_calls(program.as_text()) == 0


def test_train_step_with_auto_attention_compiles_the_flash_kernel_under_the_mesh(mesh):
    with jax.set_mesh(mesh):
        assert attn_lib.choose("auto", cached=False, seq_len=128, head_dim=128) == "splash"
    program = compile_train_step(
        KERNEL_TINY.replace(attention="auto"),
        mesh,
        rows=8,
        seq=128,
        group_size=4,
        num_minibatches=1,
        micro_batch_size=4,
        logprob_chunk=64,
    )
    assert _mosaic_calls(program.as_text()) > 0, "attention=auto on a TPU mesh should run the Pallas kernel"


def test_packed_train_step_compiles_the_flash_kernel_with_segment_ids(mesh):
    """rl.packing on a TPU mesh: the kernel takes the packed rows' segment ids under its shard_map."""
    program = compile_train_step(
        KERNEL_TINY.replace(attention="auto"),
        mesh,
        rows=16,
        seq=128,
        packed_rows=8,
        group_size=4,
        num_minibatches=2,
        micro_batch_size=4,
        logprob_chunk=64,
        packing=True,
    )
    assert _mosaic_calls(program.as_text()) > 0, "the packed step should run the Pallas kernel"


def test_cudnn_attention_on_a_tpu_mesh_is_a_clear_error(mesh):
    with jax.set_mesh(mesh), pytest.raises(ValueError, match="needs a GPU"):
        attn_lib.choose("cudnn", cached=False, seq_len=128, head_dim=128)
