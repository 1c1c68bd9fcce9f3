"""Plan one RL step on a topology: compile (or, off TPU, only model) each program, judge whether it
fits the chip's HBM beside what stays resident, and search a few candidates for what does not."""

from __future__ import annotations

import dataclasses

import jax

from microcoder_jax import config as config_lib
from microcoder_jax import sharding
from microcoder_jax.plan import analytic, paged, programs
from microcoder_jax.plan.topologies import HEADROOM, Topology


@dataclasses.dataclass
class Row:
    program: programs.Program
    compiled: programs.Compiled | None  # None: analytic only
    estimate: analytic.Estimate
    resident: int  # train-state / reference bytes alive but not among the program's arguments

    @property
    def total(self) -> int:
        own = self.compiled.total_bytes if self.compiled is not None else self.estimate.total
        return own + self.resident

    @property
    def error(self) -> str:
        return self.compiled.error if self.compiled is not None else ""

    @property
    def analytic_error(self) -> float | None:
        """(analytic - XLA) / XLA of the program's own bytes (arguments, temporaries, outputs), the
        resident state left out of both sides (it is the same figure on each, and would dilute the
        error); None without a compile."""
        c = self.compiled
        if c is None or (c.error and not c.oom) or c.total_bytes <= 0:
            return None
        return (self.estimate.total - c.total_bytes) / c.total_bytes


@dataclasses.dataclass
class Plan:
    topology: Topology
    mesh_shape: dict
    model_config: object
    shapes: programs.Shapes
    rows: list
    suggestions: list = dataclasses.field(default_factory=list)
    attention: str = ""  # what `model.attention` resolves to on the target, per phase (attention_label)

    def verdict(self, row: Row) -> str:
        if row.error and not (row.compiled is not None and row.compiled.oom):
            return "does not compile"
        used = row.total / self.topology.chip.hbm_bytes
        return (
            "fits"
            if used <= HEADROOM and not row.error
            else "tight"
            if used <= 1.0 and not row.error
            else "does not fit"
        )

    @property
    def fits(self) -> bool:
        return all(self.verdict(r) == "fits" for r in self.rows)


def abstract_mesh(config, devices: int):
    """A device-free mesh of the config's shape for analytic-only plans (GPUs and others)."""
    sizes = sharding.mesh_sizes(config.mesh.data, config.mesh.fsdp, config.mesh.tensor, devices)
    return jax.sharding.AbstractMesh(sizes, sharding.MESH_AXES)


def _resident(
    program, state_bytes: int, params_bytes: int, rl_config, open_session: int = 0, lora: bool = False
) -> int:
    """The train state (and a KL reference) stays in HBM through every program; minus what the
    program takes as its arguments (the stored params, or the whole state for the train step).
    `open_session`: bytes of a paged DAPO session still decoding refills while a finished batch's
    old log-probs run (its pool, engine state and decode-layout weights). Under LoRA the reference
    is the state's own frozen base with zero adapters (trainer/learner.py): no second copy."""
    ref = params_bytes if rl_config.kl_beta > 0 and not lora else 0
    if program.name == "train step":
        return ref
    # stored params (or the paged engine's state, then the stored params), not the sampler's decode copy
    takes_params = isinstance(program.args[0], dict)
    beside = open_session if program.name == "old log-probs" else 0
    return state_bytes - (params_bytes if takes_params else 0) + ref + beside


def _open_session_bytes(config, rl_config, progs) -> int:
    """Per-device bytes of the paged session a DAPO step keeps open through the old log-probs
    (trainer.step_batch: a batch is scored while refills still decode); 0 without one, as with
    multi-turn episodes (each generation batch's session is closed before the batch is scored)."""
    turns = config_lib.block_types()["env"].from_node(config.env).turns
    if config.sampling.engine != "paged" or not rl_config.dynamic_sampling or turns > 1:
        return 0
    run = next(p for p in progs if p.name == "sample decode")
    return programs.local_bytes(run.args[0]) + programs.local_bytes(run.args[1])


def step_programs(config, rl_config, mesh, tpu: bool | str = True) -> list:
    """The programs of one RL step and of eval sampling for this config's sampler engine."""
    builder = paged.step_programs if config.sampling.engine == "paged" else programs.rl_step_programs
    return builder(config, rl_config, mesh, tpu)


def plan(
    config,
    topology: Topology,
    *,
    cache_dir: str | None = programs.CACHE_DIR,
    only: tuple = (),
    search: bool = True,
    compile_: bool = True,
    log=lambda *_: None,
) -> Plan:
    """Compile (TPU) or model (others, or compile_=False) every program of one RL step on `topology`."""
    rl_config = config_lib.rl_config_of(config)
    compile_ = compile_ and topology.aot_name is not None
    mesh = programs.make_mesh(config, topology.devices()) if compile_ else abstract_mesh(config, topology.num_devices)
    progs = step_programs(config, rl_config, mesh, topology.platform)
    open_session = _open_session_bytes(config, rl_config, progs)
    if not config.train.eval_every:  # a run that never evaluates compiles no eval programs
        progs = [p for p in progs if not p.name.startswith("eval ")]
    if only:
        progs = [p for p in progs if p.name in only]
    shapes = programs.shapes_of(config, rl_config, mesh)
    mc = progs[0].model_config
    state = programs.abstract_state(mc, rl_config, mesh)
    state_bytes, params_bytes = programs.local_bytes(state), programs.local_bytes(state.params)
    rows = []
    for prog in progs:
        log(f"{'compiling' if compile_ else 'modelling'} {prog.name} ...")
        on = prog.mesh if prog.mesh is not None else mesh
        compiled = programs.compile_program(prog, on, cache_dir, topology.aot_name or "") if compile_ else None
        gathers = _gathers_weights(compiled, mc) if compiled is not None else False  # the decode layout
        est = (
            paged.estimate(prog, on)
            if paged.is_paged(prog)
            else analytic.estimate(prog, mesh, shapes, rl_config, gathers_weights=gathers)
        )
        resident = _resident(prog, state_bytes, params_bytes, rl_config, open_session, lora=bool(mc.lora_rank))
        rows.append(Row(prog, compiled, est, resident))
    result = Plan(topology, dict(mesh.shape), mc, shapes, rows, attention=attention_label(config, topology, shapes))
    if search and not result.fits:
        from microcoder_jax.plan import suggest

        result.suggestions = suggest.search(config, topology, result, plan=plan, cache_dir=cache_dir, log=log)
    return result


_DECODE_NAMES = {"kernel": "the Pallas paged kernel", "gpu_kernel": "the Pallas (Triton) paged kernel"}


def attention_label(config, topology: Topology, shapes) -> str:
    """The attention the run would use on `topology` (models/attention.py's `auto` rules there, not
    this host's): the training passes' implementation and the sampler's decode."""
    train = programs.model_config_for(config, topology.platform, shapes.seq).attention
    if config.sampling.engine == "paged":
        decode = _DECODE_NAMES.get(paged.decode_kernel(config, topology.platform), "xla")
    else:
        decode = "xla"
    return f"{train} (training), {decode} (decode)"


def _gathers_weights(compiled, mc) -> bool:
    """True when a decode loop all-gathers about a layer's worth per layer each step."""
    for loop in compiled.loops:
        count = loop["collectives"].get("all-gather", [0, 0])[0]
        if loop["data_dependent"] and count >= mc.num_layers:
            return True
    return False
