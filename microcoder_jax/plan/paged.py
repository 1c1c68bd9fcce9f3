"""The paged engine's programs (`sampling.engine=paged`) for the planner, and their analytic model.

One sampler call of the paged engine reshards the weights into the decode layout once (the
"decode layout" program, shared with the static sampler) and runs two jitted programs
(sampling/paged_engine.py): `admit` (prefill a block of up to 64 prompts into the page pool) and `run`
(the decode loop over S slots).
They are planned at the sizes `paged_sampler.PagedSession` would pick: S = `sampling.slots` (or its
default), a pool of every prompt's pages plus S sequences at the cap. The engine's state (pool,
queue, outputs) is replicated over the data axes and its KV heads split over `tensor`. The pool is
counted at its dtype (`sampling.kv_dtype`: int8 keys and values plus a float32 scale per token and
head); `kv_dtype_rows` gives each decode program's bytes and roofline time at both dtypes.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import sharding
from microcoder_jax.plan.programs import Program, _sds, local_bytes, sampler_params
from microcoder_jax.sampling.paged_sampler import MAX_ADMIT  # PagedSession's admit block


def engine_shape(
    config, prompts: int, group: int, width: int, max_new: int, batch_prompts: int | None = None, held=None
):
    """The EngineShape PagedSession builds for one call of `prompts` x `group` rows (its defaults);
    a session with room for more (DAPO's refills, partial rollouts' ring) sizes its slots for one
    generation batch of `batch_prompts`, as the worker's open_session does. `held`: the
    episodes.HeldLayout of a multi-turn session (its prompt width, queue and pool)."""
    from microcoder_jax.sampling import paged_engine as engine, paged_sampler

    s = config.sampling
    rows = held.in_flight if held is not None else (batch_prompts or prompts) * group
    slots = paged_sampler.call_slots(s.slots, rows)
    ps = s.page_size
    if width % ps:
        raise ValueError(f"prompt bucket {width} is not a multiple of sampling.page_size={ps}")
    if held is not None:
        prompts, width = held.max_prompts, held.prompt_width
    return engine.EngineShape(
        slots=slots,
        samples=group,
        max_prompts=prompts,
        prompt_width=width,
        max_new=max_new,
        page_size=ps,
        num_pages=held.num_pages if held else engine.default_num_pages(prompts, width, slots, max_new, ps),
        block_pages=max(1, 64 // ps),
        refill_every=s.refill_every,
        shrink_at=paged_sampler.shrink_at(
            paged_sampler.tail_sizes(slots, paged_sampler.default_tail_slots(slots)), slots
        ),
        kv_dtype=s.kv_dtype,
        hold=held is not None,
    )


def _state(mc, shape, mesh):
    """The engine state as abstract arrays: pool KV heads over `tensor`, everything else replicated."""
    from microcoder_jax.models import paged_attention as pa
    from microcoder_jax.sampling import paged_engine as engine

    state = jax.eval_shape(lambda: engine.init_state(mc, shape, 0))
    rep = sharding.replicated(mesh)
    spec = sharding.logical_to_spec(pa.POOL_AXES, mesh, pa.pool_shape(mc, shape.num_pages, shape.page_size))
    pool_sh = lambda a: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec[: a.ndim]))  # noqa: E731
    out = jax.tree.map(lambda a: _sds(a.shape, a.dtype, rep), state)
    out["pool"] = jax.tree.map(lambda a: _sds(a.shape, a.dtype, pool_sh(a)), state["pool"])
    return out


def paged_programs(
    tag, config, mc, mesh, prompts, group, width, max_new, batch_prompts=None, held=None
) -> list[Program]:
    """`engine.admit` (one block of min(batch_prompts, 64) prompts: a push is one generation batch)
    and `engine.run` of a session with room for `prompts`; with `held` (a multi-turn session's
    episodes.HeldLayout) also `engine.extend` of one block of continuing rows."""
    from microcoder_jax.sampling.interface import PagedSampler

    shape = engine_shape(config, prompts, group, width, max_new, batch_prompts, held)
    state, params, rep = _state(mc, shape, mesh), sampler_params(mc, mesh), sharding.replicated(mesh)
    a = 1 << (min(batch_prompts or prompts, MAX_ADMIT) - 1).bit_length()  # admit blocks are powers of two
    a = held.push_block if held is not None else a
    row = lambda d: _sds((a * group,), d, rep)  # noqa: E731
    admit_args = (
        state,
        params,
        _sds((a, width), jnp.int32, rep),
        _sds((a, width), jnp.int32, rep),
        _sds((), jnp.int32, rep),
        row(jnp.int32),
        row(jnp.float32),
        row(jnp.float32),
        row(jnp.int32),
        row(jnp.int32),
    )
    admit = Program(f"{tag} admit", PagedSampler.programs["admit"], admit_args, dict(config=mc, shape=shape), mc, mesh)
    run_args = (
        state,
        params,
        _sds((2,), jnp.int32, rep),
        _sds((), jnp.int32, rep),
        _sds((2,), jnp.uint32, rep),
        _sds((), jnp.int32, rep),
    )
    run = Program(f"{tag} decode", PagedSampler.programs["decode"], run_args, dict(config=mc, shape=shape), mc, mesh)
    if held is None:
        return [admit, run]
    b = lambda d: _sds((held.block,), d, rep)  # noqa: E731
    extend_args = (state, params, b(jnp.int32), _sds((held.block, held.chunk), jnp.int32, rep), b(jnp.int32))
    extend_args += (_sds((), jnp.int32, rep), b(jnp.int32), b(jnp.float32), b(jnp.float32), b(jnp.int32))
    extend_args += (b(jnp.int32), _sds((), jnp.int32, rep))  # sampling ids, the first new prompt index
    kwargs = dict(config=mc, shape=shape)
    return [admit, run, Program(f"{tag} extend", PagedSampler.programs["extend"], extend_args, kwargs, mc, mesh)]


def is_paged(program: Program) -> bool:
    return "shape" in program.kwargs and hasattr(program.kwargs["shape"], "num_pages")


def token_head_bytes(mc, kv_dtype) -> int:
    """Bytes one token's key (or value) of one head takes in the pool: head_dim x dtype bytes, plus
    the float32 scale of an int8 pool."""
    from microcoder_jax.models import paged_attention as pa

    dtype = pa.pool_dtype(kv_dtype, mc)
    return mc.head_dim * dtype.itemsize + (4 if dtype == jnp.int8 else 0)


def _local_kv_heads(mc, tensor: int) -> int:
    return mc.num_kv_heads // tensor if mc.num_kv_heads % tensor == 0 else mc.num_kv_heads


def pool_bytes(mc, shape, tensor: int) -> int:
    """pages x page_size x layers x 2 (K, V) x kv_heads (per device) x the token-head bytes of the dtype."""
    return (
        shape.num_pages
        * shape.page_size
        * mc.num_layers
        * 2
        * _local_kv_heads(mc, tensor)
        * token_head_bytes(mc, shape.kv_dtype)
    )


def slots_in_same_pool(mc, shape, kv_dtype: str) -> int:
    """The most slots a ``kv_dtype`` pool holds in the bytes of ``shape``'s pool (prompt pages kept)."""
    from microcoder_jax.sampling import paged_engine as engine

    budget = pool_bytes(mc, shape, 1)
    per_page = shape.page_size * mc.num_layers * 2 * mc.num_kv_heads * token_head_bytes(mc, kv_dtype)
    pages = int(budget // per_page) - shape.max_prompts * shape.prompt_pages
    return max(0, pages // engine.max_own_pages(shape.max_new, shape.page_size))


def decode_kernel(config, tpu: bool | str) -> str:
    """What the paged decode runs on the target (models/paged_attention.choose): "kernel" (the TPU
    Pallas kernel), "gpu_kernel" (the Pallas Triton kernel) or "xla"."""
    from microcoder_jax.models import paged_attention as pa
    from microcoder_jax.plan import programs

    mc = programs.model_config_for(config, False, 0)
    dtype = pa.pool_dtype(config.sampling.kv_dtype, mc)
    on = programs.target_platform(tpu)
    return pa.choose(config.model.attention, mc.head_dim, dtype, on=on, page_size=config.sampling.page_size)


def paged_model_config(config, tpu: bool | str):
    """The model config of the paged programs: `auto` resolved for the target chip (splash = a
    Pallas paged kernel, TPU or GPU, where it serves: pages stream through on-chip memory, no
    gathered copy; else XLA); admit's prefill is XLA either way."""
    from microcoder_jax.plan import programs

    mc = programs.model_config_for(config, False, 0)  # the shape; attention is set below
    kernel = decode_kernel(config, tpu) in ("kernel", "gpu_kernel")
    return mc.replace(attention="splash" if kernel else "xla")


def estimate(program: Program, mesh):
    """Per-device bytes of admit / run by component, FLOPs and HBM traffic (the analytic.Estimate)."""
    from microcoder_jax.plan import analytic

    mc, shape = program.model_config, program.kwargs["shape"]
    d, h, k, hd, f, v, l, layer = analytic._dims(mc)
    t = mesh.shape["tensor"]
    state, params = program.args[0], program.args[1]
    pool = pool_bytes(mc, shape, t)
    comp = {
        "params (args)": local_bytes(params),
        "page pool (args, donated)": pool,
        "engine state besides the pool (args, donated)": local_bytes(state) - local_bytes(state["pool"]),
    }
    if program.name.endswith("admit"):
        a, width = program.args[2].shape
        local = analytic._split(a, mesh)  # XLA splits the block's rows
        comp["prompt KV cache (dense, one layer alive)"] = analytic._kv(mc, local, width, t) // l
        comp["activations (one layer, forward)"] = analytic._layer_activations(mc, local * width, True, t, width) // 2
        comp["attention scores (f32) and probabilities (bf16), one layer"] = local * (h // t) * width * width * 6
        flops = 2.0 * l * layer * a * width + analytic._attention_flops(mc, a, width, width, False)
        return analytic.Estimate(comp, flops=flops, model_flops=flops, hbm_bytes=(l * layer + v * d) * 4 / t)
    if program.name.endswith("extend"):  # engine.extend: the rows' kept keys gathered dense, C tokens prefilled
        a, c = program.args[3].shape
        width, local = shape.prompt_width, analytic._split(a, mesh)
        dense = analytic._kv(mc, local, width, t)  # every layer's context keys and values, model dtype
        comp["context KV gathered dense (every layer)"] = dense
        comp["activations (one layer, forward)"] = analytic._layer_activations(mc, local * c, True, t, width) // 2
        comp["attention scores (f32) and probabilities (bf16), one layer"] = local * (h // t) * c * width * 6
        flops = 2.0 * l * layer * a * c + analytic._attention_flops(mc, a, c, width, False)
        pages = local * width * l * 2 * max(k // t, 1) * token_head_bytes(mc, shape.kv_dtype)
        # the weights once, the pages read and new ones written, the dense copy
        hbm = analytic.decode_weight_bytes(mc) / t + pages * 2 + dense * 2
        return analytic.Estimate(comp, flops=flops, model_flops=flops, hbm_bytes=hbm)
    s = shape.slots
    kvh = max(k // t, 1)
    # the Pallas kernel (paged_model_config) streams pages through VMEM: no gathered copy in HBM
    if mc.attention != "splash":
        comp["one layer's gathered pages (f32 keys and values)"] = (
            s * 2 * kvh * shape.block_pages * shape.page_size * hd * 4 * 2
        )
    comp["sampling temporaries (logits, probs x4)"] = s * v * 4 * 4
    # every row to the cap, every prompt filling its bucket: the worst case, as the engine schedules it
    flops, hbm = decode_terms(program, cap_schedule(shape))
    return analytic.Estimate(comp, flops=flops, model_flops=flops, hbm_bytes=hbm, tokens=shape.rows * shape.max_new)


@functools.lru_cache(maxsize=32)
def cap_schedule(shape):
    """The engine's schedule of one call of `shape` with every row at the cap and every prompt
    filling its bucket (decode_sim replays the engine's loop)."""
    from microcoder_jax.plan import decode_sim

    prompts = shape.rows // shape.samples
    return decode_sim.simulate(
        np.full(shape.rows, shape.max_new),
        np.full(prompts, shape.prompt_width),
        group=shape.samples,
        slots=shape.slots,
        page_size=shape.page_size,
        refill_every=shape.refill_every,
        max_new=shape.max_new,
        prompt_width=shape.prompt_width,
        block=shape.block_pages * shape.page_size,
    )


def decode_terms(program, schedule):
    """FLOPs and per-device HBM bytes of a paged decode call that ran `schedule` (a
    decode_sim.Schedule): each step reads the chip's share of the weights and the pages of the
    keys attention reads, prompt pages included, at the pool's bytes per token and head (an int8
    pool's scales too): with a paged kernel (attention "splash"), each live slot's own blocks;
    on the XLA path, every slot's blocks up to the longest live sequence (the gathered view)."""
    from microcoder_jax.plan import analytic

    mc, shape, mesh = program.model_config, program.kwargs["shape"], program.mesh
    _, _, k, _, _, _, l, _ = analytic._dims(mc)
    t = mesh.shape["tensor"]
    shards = sharding.batch_shards(mesh)  # each step's rows split over them when they divide them (analytic._split)
    kvh, token = max(k // t, 1), token_head_bytes(mc, shape.kv_dtype)
    block = shape.block_pages * shape.page_size
    keys = -(-schedule.keys // block) * block  # attention reads whole blocks up to the longest live slot
    local = np.where(schedule.widths % shards == 0, schedule.widths // shards, schedule.widths)
    flops = float((analytic.decode_flops_per_token(mc) * schedule.widths).sum()) + float(
        sum(analytic._attention_flops(mc, int(s), 1, int(n), False) for s, n in zip(schedule.widths, keys))
    )
    if mc.attention == "splash":  # the kernel reads cdiv(length, block) blocks per slot
        own = schedule.own_keys
        kv_keys = np.where(schedule.widths % shards == 0, own / shards, own)
    else:
        kv_keys = local * keys
    weights = analytic.decode_weight_bytes(mc)  # the merged copy, or an unmerged LoRA's stored base + adapters
    hbm = float(schedule.steps * weights / t + (l * 2 * kvh * token * kv_keys).sum())
    return flops, hbm


def pa_dtype(mc, shape):
    from microcoder_jax.models import paged_attention as pa

    return pa.pool_dtype(shape.kv_dtype, mc)


def kv_dtype_rows(plan) -> list[dict]:
    """Per paged decode program: pool GiB, HBM GB per device and roofline seconds at the model's dtype
    and at int8 (attention as `paged_model_config` picks it for each), and the slots an int8 pool
    holds in the model-dtype pool's bytes."""
    import dataclasses

    chip, n = plan.topology.chip, plan.topology.num_devices
    out = []
    for row in plan.rows:
        p = row.program
        if not (is_paged(p) and p.name.endswith("decode")):
            continue
        t = p.mesh.shape["tensor"]
        got = {}
        for dtype in ("model", "int8"):
            shape = dataclasses.replace(p.kwargs["shape"], kv_dtype=dtype)
            mc = p.model_config  # the kernel, where it serves, takes both dtypes
            est = estimate(dataclasses.replace(p, kwargs=dict(p.kwargs, shape=shape), model_config=mc), p.mesh)
            got[dtype] = dict(pool=pool_bytes(mc, shape, t), hbm=est.hbm_bytes, seconds=est.seconds(chip, n))
        base = dataclasses.replace(p.kwargs["shape"], kv_dtype="model")
        out.append(
            dict(
                name=p.name,
                slots=base.slots,
                int8_slots=slots_in_same_pool(p.model_config, base, "int8"),
                **{f"{k}_{d}": v for d, r in got.items() for k, v in r.items()},
            )
        )
    return out


def step_programs(config, rl_config, mesh, tpu: bool | str = True) -> list[Program]:
    """`programs.rl_step_programs` for `sampling.engine=paged`: admit + run instead of prefill + decode
    (`planner.step_programs` picks one by the config's engine)."""
    from microcoder_jax.plan import programs
    from microcoder_jax.trainer.step_batch import session_prompts

    sh = programs.shapes_of(config, rl_config, mesh)
    mc = paged_model_config(config, tpu)
    # DAPO's refill batch, partial rollouts' ring
    prompts = session_prompts(config.data.num_prompts, rl_config, config.train)
    on = sharding.sampler_mesh(mesh, config.sampling.decode_tensor, mc.num_kv_heads)  # the sampler's mesh
    layout = programs.decode_layout_program(mc, mesh, on)  # PagedSession reshards once per session
    held = held_layout_of(config, sh)
    return (
        [layout]
        + paged_programs(
            "sample", config, mc, on, prompts, sh.group, sh.prompt_width, sh.max_new, config.data.num_prompts, held
        )
        + [
            programs.logprob_program(config, rl_config, mesh, sh, tpu),
            programs.train_program(config, rl_config, mesh, sh, tpu),
        ]
        + paged_programs(
            "eval", config, mc, on, config.eval.batch_problems, sh.eval_samples, sh.prompt_width, sh.eval_max_new
        )
    )


def held_layout_of(config, sh):
    """The multi-turn session's layout (trainer/episodes.py: the shape HeldTurns opens), or None
    with one turn."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.trainer.episodes import held_layout

    typed = {name: config_lib.block_types()[name].from_node(config[name]) for name in ("data", "sampling", "env")}
    if typed["env"].turns == 1:
        return None
    return held_layout(
        typed["data"], typed["sampling"], typed["env"], config.data.num_prompts, sh.group, sh.max_new, MAX_ADMIT
    )
