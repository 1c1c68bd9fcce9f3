"""The programs of one RL step, lowered and compiled ahead of time for a TPU topology.

Each program is the jitted function the training loop runs (sampler prefill and decode, the
old-log-prob pass, the train step, eval sampling), called on `jax.ShapeDtypeStruct`s with the
shardings the loop gives its arrays, at the config's real shapes: nothing is allocated. The
widest prompt bucket is planned (the worst case the loop can meet). Compiled results are cached
on disk by the lowered program's text, so a rerun or a candidate seen before costs no compile.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import config as config_lib
from microcoder_jax import models, sharding
from microcoder_jax.plan import hlo

CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "microcoder_jax", "plan")


@dataclasses.dataclass(frozen=True)
class Shapes:
    """The static sizes one RL step runs at (rows, widths, micro-batch, eval batch)."""

    rows: int  # num_prompts * G
    prompts: int  # prompts per sampler call, padded to the data-parallel shards
    group: int
    prompt_width: int  # widest prompt bucket
    max_new: int
    micro: int  # the old-log-prob pass's rows per forward: rl.packing.micro_batch over all `rows`
    step_micro: int  # the train step's rows per forward/backward: rl.packing.micro_batch over one mini-batch
    eval_prompts: int
    eval_samples: int
    eval_max_new: int
    phases: int
    episode_width: int = 0  # multi-turn episodes (env.max_turns > 1): the learner's rows are this wide
    shared_width: int = 0  # rl.share_prompts: the prompt columns a group's rows share (0 = none)
    prompt_block: bool = True  # padded rows: the prompt's columns skip the LM head (not packed rows)

    @property
    def seq(self) -> int:
        """The learner's row width: prompt + answer, or a whole multi-turn episode (trainer/episodes.py)."""
        return self.episode_width or self.prompt_width + self.max_new

    @property
    def shared(self):
        """The learner programs' static `shared` argument (trainer/learner.prompt_block): (width, G)
        under rl.share_prompts, else (prompt width, 1); None for packed rows."""
        if not self.prompt_block:
            return None
        return (self.shared_width, self.group) if self.shared_width else (self.prompt_width, 1)

    def head_tokens(self, rows: int) -> int:
        """Columns of `rows` rows that go through the LM head: the answers' (a prompt block's
        log-probs are not computed), every column but the first of packed rows."""
        return rows * (self.seq - (self.prompt_width if self.prompt_block else 1))

    def sharing(self, micro: int) -> int:
        """Rows that run one copy of the shared prompt in a micro-batch of `micro` rows (1: none)."""
        return math.gcd(micro, self.group) if self.shared_width else 1

    def learner_tokens(self, rows: int, micro: int) -> int:
        """Token columns the learner's layers run for `rows` rows of one device's slice of a
        micro-batch of `micro`: every row's columns, or under rl.share_prompts the answers' plus
        one prompt per group the slice holds rows of (a device with one row of a group runs its
        whole prompt: sharing pays where a device holds several rows of a group)."""
        w = self.shared_width
        return rows * (self.seq - w) + -(-rows // self.sharing(micro)) * w


@dataclasses.dataclass
class Program:
    """One jitted function with abstract arguments, ready to lower under `mesh`."""

    name: str
    fn: Callable
    args: tuple
    kwargs: dict
    model_config: Any
    mesh: Any = None  # lowered under this mesh (None: the run's); the paged sampler's may differ
    out_mesh: Any = None  # where its output lands, if elsewhere (the decode layout onto the sampler's mesh)


def target_platform(tpu: bool | str) -> str:
    """`tpu` as the platform the programs are planned for: True / "tpu", "gpu", else "cpu" (False:
    an unnamed device, planned with the XLA paths)."""
    return "tpu" if tpu is True else tpu if isinstance(tpu, str) and tpu else "cpu"


def model_config_for(config, tpu: bool | str, seq_len: int):
    """The model shape of `config` (models.model_config_from), with `auto` attention resolved for
    the target chip, not this host's CPU, by models/attention.py's rules: on TPU the flash kernel
    where the shape allows, on a GPU cuDNN in half precision (head_dim a multiple of 8 up to 128, an
    even length), else XLA. `tpu`: True / "tpu", "gpu", or False / "cpu" (see target_platform)."""
    from microcoder_jax.trainer.setup import model_vocab_size

    mc = models.model_config_from(config, model_vocab_size(config))
    if mc.attention == "auto":
        on = target_platform(tpu)
        if on == "tpu":
            kernel = seq_len % 128 == 0 and mc.head_dim % 128 == 0
            mc = mc.replace(attention="splash" if kernel else "xla")
        else:
            half = jnp.dtype(mc.dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
            cudnn = on == "gpu" and half and mc.head_dim % 8 == 0 and mc.head_dim <= 128 and seq_len % 2 == 0
            mc = mc.replace(attention="cudnn" if cudnn else "xla")
    return mc


def make_mesh(config, devices):
    """The run's ("data", "fsdp", "tensor") mesh over the topology's devices: the trainer's own
    sharding.mesh_from_sizes (-1 = the rest; a smaller mesh uses the first devices)."""
    try:
        mesh = sharding.mesh_from_sizes(config.mesh.data, config.mesh.fsdp, config.mesh.tensor, devices=list(devices))
    except ValueError as e:  # more devices than the topology has
        raise config_lib.ConfigError(f"{e} on the topology") from None
    assert mesh is not None  # given devices, mesh_from_sizes builds a mesh, one device included
    return mesh


def shapes_of(config, rl_config, mesh) -> Shapes:
    """The loop's shapes: the static sampler's prompts padded to the data shards
    (static_sampler.padded_prompts), the micro-batches of the log-prob pass (over the whole batch)
    and of the train step (over one mini-batch, as rl/step.py caps it), by rl.packing.micro_batch."""
    from microcoder_jax.rl import packing
    from microcoder_jax.sampling.static_sampler import padded_prompts

    rows = config.data.num_prompts * config.sampling.group_size
    return Shapes(
        rows=rows,
        prompts=padded_prompts(config.data.num_prompts, mesh),
        group=config.sampling.group_size,
        prompt_width=max(config.data.prompt_buckets),
        max_new=config.sampling.max_new_tokens,
        micro=packing.micro_batch(rl_config, rows),
        step_micro=packing.micro_batch(rl_config, rows // rl_config.num_minibatches),
        eval_prompts=padded_prompts(config.eval.batch_problems, mesh),
        eval_samples=config.eval.samples,
        eval_max_new=config.eval.max_new_tokens,
        phases=config.sampling.decode_phases,
        episode_width=_episode_width(config),
        shared_width=max(config.data.prompt_buckets) if rl_config.share_prompts else 0,
        prompt_block=not rl_config.packing,
    )


def _episode_width(config) -> int:
    """The learner's row width under multi-turn episodes (EnvConfig.row_width), else 0."""
    from microcoder_jax.envs.config import EnvConfig

    env = EnvConfig.from_node(config.env) if "env" in config else EnvConfig()
    if env.turns == 1:
        return 0
    return env.row_width(max(config.data.prompt_buckets), config.sampling.max_new_tokens)


def later_turn_width(config) -> int:
    """The widest prompt bucket of turns >= 1 (trainer/episodes.turn_widths), 0 with one turn."""
    from microcoder_jax.envs.config import EnvConfig
    from microcoder_jax.sampling.config import SamplingConfig
    from microcoder_jax.data.config import DataConfig
    from microcoder_jax.trainer.episodes import turn_widths

    env = EnvConfig.from_node(config.env)
    if env.turns == 1:
        return 0
    return max(turn_widths(DataConfig.from_node(config.data), SamplingConfig.from_node(config.sampling), env))


def _sds(shape, dtype, sh):
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=sh)


def _rows(mesh, shape, dtype):
    """An array with rows over the data axes when they divide it (sharding.put_batch's rule)."""
    sh = sharding.batch_sharding(mesh, len(shape)) if sharding.rows_split(mesh, shape[0]) else sharding.replicated(mesh)
    return _sds(shape, dtype, sh)


def _logical(mesh, shape, dtype, axes):
    return _sds(shape, dtype, jax.sharding.NamedSharding(mesh, sharding.logical_to_spec(axes, mesh, shape)))


def abstract_params(model_config, mesh):
    """The fp32 master weights as the loop holds them (FSDP-sharded per sharding.py)."""
    shapes = jax.eval_shape(lambda: models.init_params(model_config, jax.random.key(0)))
    shardings = sharding.logical_to_sharding(
        models.param_logical_axes(model_config), mesh, models.param_shapes(model_config)
    )
    return jax.tree.map(lambda s, h: _sds(s.shape, s.dtype, h), shapes, shardings)


def abstract_state(model_config, rl_config, mesh):
    from microcoder_jax.trainer import setup as run_setup

    return run_setup.train_state_shapes(model_config, rl_config, mesh)


def decode_layout_program(mc, mesh, to_mesh=None) -> Program:
    """The sampler's once-per-call reshard of the stored params into its decode layout,
    onto ``to_mesh`` (the paged sampler's, same devices; default ``mesh``)."""
    from microcoder_jax.sampling.interface import StaticSampler

    to_mesh = mesh if to_mesh is None else to_mesh
    reshard = StaticSampler.programs["decode layout"](mc, to_mesh, None)
    return Program("decode layout", reshard, (abstract_params(mc, mesh),), {}, mc, out_mesh=to_mesh)


def sampler_params(mc, mesh):
    """What prefill and decode read: the stored params in the decode layout."""
    from microcoder_jax.sampling import static_sampler as sampler

    return sampler.decode_param_specs(mc, mesh)


def sampler_programs(tag, config, mc, mesh, prompts, group, width, max_new, phases):
    """Prefill and decode of one `sampler.generate` call (its two jitted programs)."""
    from microcoder_jax.sampling import static_sampler as sampler
    from microcoder_jax.sampling.interface import StaticSampler

    params = sampler_params(mc, mesh)
    rows = prompts * group
    ids, mask = (_rows(mesh, (prompts, width), jnp.int32) for _ in range(2))
    prefill = Program(
        f"{tag} prefill", StaticSampler.programs["prefill"], (params, ids, mask), dict(config=mc, num_samples=group), mc
    )
    layer = _logical(mesh, (prompts, mc.num_kv_heads, width, mc.head_dim), mc.dtype, sampler.CACHE_AXES)
    cache = models.KVCache(k=(layer,) * mc.num_layers, v=(layer,) * mc.num_layers)
    logits = _logical(mesh, (rows, mc.vocab_size), jnp.float32, ("batch", "vocab"))
    per_row = [_rows(mesh, (rows,), d) for d in (jnp.float32, jnp.float32, jnp.int32)]
    rep = sharding.replicated(mesh)
    decode_args = (
        params,
        cache,
        logits,
        mask,
        *per_row,
        _sds((2,), jnp.int32, rep),
        _sds((), jnp.int32, rep),
        _sds((2,), jnp.uint32, rep),
    )
    decode = Program(
        f"{tag} decode",
        StaticSampler.programs["decode"],
        decode_args,
        dict(config=mc, max_new_tokens=max_new, phases=phases),
        mc,
    )
    return [prefill, decode]


def logprob_program(config, rl_config, mesh, shapes: Shapes, tpu: bool | str) -> Program:
    """The old-log-prob pass on the padded batch, micro-batched as the learner runs it."""
    from microcoder_jax.rl.logprobs import compute_logprobs
    from microcoder_jax.trainer.learner import padded_micro_batch

    mc = model_config_for(config, tpu, shapes.seq)
    n, s = shapes.rows, shapes.seq
    args = (abstract_params(mc, mesh),)
    kwargs = dict(
        model_config=mc,
        tokens=_rows(mesh, (n, s), jnp.int32),
        attention_mask=_rows(mesh, (n, s), jnp.int32),
        temperature=_rows(mesh, (n,), jnp.float32),
        chunk=rl_config.logprob_chunk,
        micro_batch=padded_micro_batch(rl_config, n),
        shared=shapes.shared,
    )
    return Program("old log-probs", compute_logprobs.jitted, args, kwargs, mc)


def train_program(config, rl_config, mesh, shapes: Shapes, tpu: bool | str) -> Program:
    """The train step on the batch the loop gives it: a `Rollout` (rl/batch.py) with old log-probs,
    the reference's under the KL term, the sampler's under rl.is_correction."""
    from microcoder_jax.rl import batch as rollout_type
    from microcoder_jax.rl import step as rl_step

    mc = model_config_for(config, tpu, shapes.seq)
    batch = rollout_type.abstract(
        shapes.rows,
        shapes.seq,
        lambda shape, dtype: _rows(mesh, shape, dtype),
        ref=rl_config.kl_beta > 0,
        sampler=rl_config.is_correction != "none",
    )
    step = rl_step.make_train_step(mc, rl_config, mesh)
    jitted = step.jitted  # pyright: ignore[reportAttributeAccessIssue] (set on the step function in rl/step.py)
    return Program("train step", jitted, (abstract_state(mc, rl_config, mesh), batch), {"shared": shapes.shared}, mc)


def rl_step_programs(config, rl_config, mesh, tpu: bool | str = True) -> list[Program]:
    """Every program of one RL step plus eval sampling, in the order the loop runs them, on the
    static sampler (prefill + decode; `paged.step_programs` is the paged engine's list)."""
    sh = shapes_of(config, rl_config, mesh)
    mc_prompt = model_config_for(config, tpu, sh.prompt_width)
    out = [decode_layout_program(mc_prompt, mesh)]
    out += sampler_programs(
        "sample", config, mc_prompt, mesh, sh.prompts, sh.group, sh.prompt_width, sh.max_new, sh.phases
    )
    widest = later_turn_width(config)
    if widest:  # multi-turn episodes: later turns prefill each row's whole context (trainer/episodes.py)
        from microcoder_jax.sampling.static_sampler import padded_prompts

        mc_turn = model_config_for(config, tpu, widest)
        rows = padded_prompts(sh.rows, mesh)
        out += sampler_programs("turn", config, mc_turn, mesh, rows, 1, widest, sh.max_new, sh.phases)
    out += [logprob_program(config, rl_config, mesh, sh, tpu), train_program(config, rl_config, mesh, sh, tpu)]
    out += sampler_programs(
        "eval", config, mc_prompt, mesh, sh.eval_prompts, sh.eval_samples, sh.prompt_width, sh.eval_max_new, sh.phases
    )
    return out


# ------------------------------------------------------------------------------ compile + cache


@dataclasses.dataclass
class Compiled:
    """XLA's per-device figures of one compiled program (what the report prints)."""

    name: str
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    flops: float  # XLA cost analysis: every loop body counted once
    loops: list  # hlo.Loop dicts
    kernels: int = 0  # Pallas (Mosaic) kernel calls in the compiled program
    large_copies: int | None = None  # copies in loops of a buffer >= half the largest argument (None: not counted)
    error: str = ""  # "" = compiled; else why not
    oom: bool = False  # XLA ran out of HBM: temp_bytes is what it said it needed, args are ours
    cached: bool = False

    @property
    def total_bytes(self) -> int:
        return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes


_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _oom_temps(message: str) -> int:
    """Temporary bytes from XLA's out-of-memory message ("HLO temporaries (32.21G) exceeds ...")."""
    m = re.search(r"HLO temporaries \(([\d.]+)([KMGT])?\)", message)
    return int(float(m.group(1)) * _UNITS.get(m.group(2) or "", 1)) if m else 0


def compile_program(program: Program, mesh, cache_dir: str | None = CACHE_DIR, key_extra: str = "") -> Compiled:
    """Lower under `mesh`, compile (or read the cached result of the same lowered text, read by
    the same version of the HLO reader)."""
    with jax.set_mesh(mesh):
        lowered = program.fn.lower(*program.args, **program.kwargs)
    text = lowered.as_text()
    key = hashlib.sha256((text + key_extra + jax.__version__ + hlo.VERSION).encode()).hexdigest()[:24]
    path = os.path.join(cache_dir, key + ".json") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as f:
            return Compiled(**{**json.load(f), "name": program.name, "cached": True})
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 - XLA raises plain runtime errors; the report shows them
        message = str(e)
        temps = _oom_temps(message)
        args = local_bytes(
            [a for a in jax.tree.leaves((program.args, program.kwargs)) if isinstance(a, jax.ShapeDtypeStruct)]
        )
        result = Compiled(
            program.name,
            args if temps else 0,
            0,
            0,
            temps,
            0.0,
            [],
            error=message.strip().splitlines()[0][:300],
            oom=bool(temps),
        )
        if temps and path:
            _write(path, result)
        return result
    mem, compiled_text = compiled.memory_analysis(), compiled.as_text()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    result = Compiled(
        program.name,
        int(mem.argument_size_in_bytes),
        int(mem.output_size_in_bytes),
        int(mem.alias_size_in_bytes),
        int(mem.temp_size_in_bytes),
        float((cost or {}).get("flops", 0.0)),
        [dataclasses.asdict(loop) for loop in hlo.loops(compiled_text)],
        kernels=compiled_text.count('custom_call_target="tpu_custom_call"'),
        large_copies=hlo.large_copies(compiled_text, _largest_argument(program) // 2),
    )
    if path:
        _write(path, result)
    return result


def _largest_argument(program: Program) -> int:
    """Per-device bytes of the program's largest argument array (at least 1 MiB, so small programs
    do not count their every copy)."""
    leaves = [a for a in jax.tree.leaves(program.args) if isinstance(a, jax.ShapeDtypeStruct)]
    return max([local_bytes([a]) for a in leaves] + [1 << 21])


def _write(path: str, result: Compiled) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    record = dataclasses.asdict(result)
    record.pop("cached")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


def local_bytes(tree) -> int:
    """Per-device bytes of a pytree of sharded ShapeDtypeStructs (the largest shard)."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def with_overrides(config, **changes):
    """A copy of `config` with dotted keys changed (`rl.micro_batch_size=4`)."""
    c = copy.deepcopy(config)
    for key, value in changes.items():
        node, parts = c, key.split(".")
        for part in parts[:-1]:
            node = node[part]
        with node.unlocked():
            node[parts[-1]] = value
    return c
