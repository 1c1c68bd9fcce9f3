"""One RL step's time from the planner's rows under a length profile: per program compute, HBM and
collective seconds, the step total, each phase's share, what would cut the step most, and split
(rollout | learner) layouts.

A roofline, so an upper bound on speed (a lower bound on time) for compute and HBM: max(FLOPs /
peak, HBM bytes / bandwidth). Collectives: the compiled loops' per-device bytes (trips counted)
over the chip's ICI bandwidth (DCN for the share that crosses slices), added serially for the
upper bound and overlapped (max of the three) for the lower. Left out: kernel efficiency (real
MXU use is well under peak), collectives outside loops, host work (tokenizing, the judge's CPU
time: it is not on the chips), the data pipeline, and compile time.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from microcoder_jax.plan import analytic, decode_sim, paged


@dataclasses.dataclass
class ProgramTime:
    name: str
    calls: int  # per step (admit blocks) or per eval
    compute_s: float
    hbm_s: float
    collective_s: float
    collective_bytes: float  # per device, per call
    note: str = ""

    @property
    def serial_s(self) -> float:
        return self.calls * (max(self.compute_s, self.hbm_s) + self.collective_s)

    @property
    def overlapped_s(self) -> float:
        return self.calls * max(self.compute_s, self.hbm_s, self.collective_s)

    @property
    def bound(self) -> str:
        return max(
            (("compute", self.compute_s), ("HBM", self.hbm_s), ("ICI", self.collective_s)), key=lambda kv: kv[1]
        )[0]


def _link(topology, nbytes: float) -> float:
    """Seconds for per-device bytes over ICI, the share crossing slices over DCN."""
    chip = topology.chip
    if not chip.ici_bandwidth or nbytes <= 0:
        return 0.0
    cross = (topology.slices - 1) / topology.slices if topology.slices > 1 else 0.0
    return nbytes * (1 - cross) / chip.ici_bandwidth + (nbytes * cross / chip.dcn_bandwidth if cross else 0.0)


def _collective_bytes(row, mesh, shapes, train: bool | None) -> float:
    """Compiled: the loops' bytes, trips counted; analytic only: the FSDP passes' model."""
    if row.compiled is not None and not row.compiled.error:
        return analytic.per_step_collective_bytes(row.compiled.loops)
    if train is None:
        return 0.0
    from microcoder_jax.plan.packing import collective_bytes

    micro = shapes.step_micro if train else shapes.micro
    return collective_bytes(row.program.model_config, mesh, max(shapes.rows // micro, 1), train)


decode_terms = paged.decode_terms  # one model of a paged decode call, shared with paged.estimate


def _seconds(flops, hbm, topology):
    chip, n = topology.chip, topology.num_devices
    return flops / (n * chip.peak_flops), hbm / chip.hbm_bandwidth


def program_times(plan, config, profile, seed: int = 0) -> list[ProgramTime]:
    """Every row of `plan` timed under `profile` (lengths.Profile)."""
    from microcoder_jax import config as config_lib
    from microcoder_jax.plan.planner import abstract_mesh

    topo, sh = plan.topology, plan.shapes
    rl_config = config_lib.rl_config_of(config)
    mesh = abstract_mesh(config, topo.num_devices)
    out = []
    for row in plan.rows:
        p, est = row.program, row.estimate
        name, tag = p.name, p.name.split(" ")[0]
        tokens = 0
        coll = _collective_bytes(row, mesh, sh, {"train step": True, "old log-probs": False}.get(name))
        compute, hbm = _seconds(est.flops, est.hbm_bytes, topo)
        calls, note = 1, ""
        model_flops = est.model_flops
        if name.endswith("admit"):
            prompts = sh.prompts if tag == "sample" else sh.eval_prompts
            calls = -(-prompts // p.args[2].shape[0])
            note = "prompts padded to the bucket"
        elif name.endswith("decode") and paged.is_paged(p):
            shape = p.kwargs["shape"]
            group = shape.samples
            prompts_n = shape.rows // group if tag == "eval" else sh.prompts
            cap = shape.max_new
            batches = STEADY_BATCHES if tag == "sample" and config.train.partial_rollouts else 1
            turns = config.env.max_turns if shape.hold else 1
            sched = decode_schedules(shape, config, profile, prompts_n, sh.prompt_width, seed, batches)
            worst = -(-shape.rows // shape.slots) * cap
            tokens = turns * int(profile.responses(prompts_n * group, cap, seed).sum())
            terms = [decode_terms(p, one) for one in sched]
            flops, bytes_ = sum(f for f, _ in terms), sum(b for _, b in terms)
            compute, hbm = _seconds(flops / batches, bytes_ / batches, topo)
            steps = sum(one.steps for one in sched) / batches
            coll *= steps / max(worst, 1)
            one = -(-prompts_n * group // shape.slots) * cap
            note = f"{steps:.0f} decode steps simulated ({one} if every row ran to the cap)"
            if batches > 1:
                note += f"; partial rollouts: {batches} batches back to back, per batch"
            if turns > 1:
                note = (
                    f"{steps:.0f} decode steps simulated over env.max_turns={turns} turns, every episode "
                    f"using every turn (an upper bound; {one} a turn if every row ran to the cap)"
                )
        elif name.endswith("extend"):  # later turns: each continuing row prefills its feedback turn
            turns, n = config.env.max_turns, sh.rows
            calls = (turns - 1) * -(-n // p.args[3].shape[0])
            note = f"{turns - 1} later turn(s) of {n} rows, every episode going on (an upper bound)"
        elif name.endswith("decode"):  # the static sampler: every row until the longest is done
            train = tag in ("sample", "turn")
            cap = sh.max_new if train else sh.eval_max_new
            lengths = profile.responses(sh.rows if train else sh.eval_prompts * sh.eval_samples, cap, seed)
            longest, tokens = int(lengths.max()), int(lengths.sum())
            compute, hbm, coll = compute * longest / cap, hbm * longest / cap, coll * longest / cap
            note = f"static sampler: all rows decode {longest} steps"
        if tag == "turn":  # multi-turn episodes on the static sampler: one call per later turn
            calls = config.env.max_turns - 1
            note = "; ".join(
                x for x in (note, "later turns: every row's context prefilled, every episode going on") if x
            )
        elif name in ("train step", "old log-probs") and rl_config.packing and not profile.is_cap:
            packed = packed_times(plan, config, profile, seed)
            compute, model_flops = packed[name]["compute_s"], packed[name]["model_flops"]
            hbm, coll = 0.0, packed[name]["ici_s"] * topo.chip.ici_bandwidth
            note = "packed (rl.packing)"
        t = ProgramTime(name, calls, compute, hbm, _link(topo, coll), coll, note)
        extra = None
        recompute = config.train.partial_rollouts and config.train.partial_recompute
        if tag == "sample" and name.endswith("decode") and paged.is_paged(p) and recompute:
            shape = p.kwargs["shape"]
            flops, hbm_bytes, again = analytic.recompute(
                p.model_config, shape.slots, shape.prompt_width, shape.max_new, shape.max_prompts
            )
            re_compute, re_hbm = _seconds(flops, hbm_bytes, topo)
            extra = ProgramTime(
                "sample recompute",
                1,
                re_compute,
                re_hbm,
                0.0,
                0.0,
                f"train.partial_recompute: {again:,} tokens prefilled again per weight update (every slot at "
                "P + W, every prompt position; analytic, collectives left out)",
            )
        if name == "train step" and t.serial_s > 0:
            mfu = model_flops / (t.serial_s * topo.num_devices * topo.chip.peak_flops)
            lora = "LoRA: no base weight gradients" if p.model_config.lora_rank else ""
            t.note = "; ".join(x for x in (t.note, lora, f"implied MFU <= {mfu:.0%}") if x)
        elif name.endswith("decode") and tokens and t.serial_s > 0:
            t.note = "; ".join(x for x in (t.note, f"<= {tokens / t.serial_s:,.0f} tokens/s") if x)
        out += [t] if extra is None else [t, extra]
    return out


def rollout_mask(plan, profile, seed: int = 0) -> np.ndarray:
    """The rollout attention mask [rows, P + max_new] of one step under `profile` (prompts left-padded)."""
    sh = plan.shapes
    prompts = np.repeat(profile.prompts(sh.rows // sh.group, sh.prompt_width, seed + 1), sh.group)
    responses = profile.responses(sh.rows, sh.max_new, seed)
    cols = np.arange(sh.seq)[None]
    return ((cols >= sh.prompt_width - prompts[:, None]) & (cols < sh.prompt_width + responses[:, None])).astype(
        np.int32
    )


def packed_times(plan, config, profile, seed: int = 0) -> dict:
    """Both training passes, padded and packed, on the profile's mask (plan.packing's model)."""
    from microcoder_jax.plan.packing import compare_mask

    r = compare_mask(config, plan.topology, rollout_mask(plan, profile, seed))
    return {name: r["passes"][(name, "packed")] for name in ("old log-probs", "train step")} | {
        "padded": {name: r["passes"][(name, "padded")] for name in ("old log-probs", "train step")}
    }


PHASES = {
    "sampling": (
        "decode layout",
        "sample prefill",
        "sample admit",
        "sample decode",
        "sample extend",
        "sample recompute",
        "turn prefill",
        "turn decode",
    ),
    "old log-probs": ("old log-probs",),
    "train": ("train step",),
    "eval": ("eval prefill", "eval admit", "eval decode"),
}


def step_summary(plan, config, times: list[ProgramTime]) -> dict:
    """Step totals (serial upper / overlapped lower bound) and each phase's share; eval amortized
    over `train.eval_every` steps."""
    every = config.train.eval_every or 0
    phases = {}
    for phase, names in PHASES.items():
        rows = [t for t in times if t.name in names]
        if not rows:
            continue
        scale = (1.0 / every) if phase == "eval" and every else 1.0
        phases[phase] = dict(
            serial_s=scale * sum(t.serial_s for t in rows), overlapped_s=scale * sum(t.overlapped_s for t in rows)
        )
    total = sum(p["serial_s"] for p in phases.values())
    low = sum(p["overlapped_s"] for p in phases.values())
    for p in phases.values():
        p["share"] = p["serial_s"] / total if total else float("nan")
    return dict(phases=phases, step_serial_s=total, step_overlapped_s=low, eval_every=every)


def cuts(plan, config, profile, times, summary, splits=None, dropped: list | None = None) -> list[dict]:
    """What would cut the step most, ranked by the estimated saving (serial step seconds). Only
    changes that save time and fit are offered: a config change is planned (analytic) and kept when
    no program grows past the chip (a program may grow, if it still fits); a split when both sides
    fit. The rest go to `dropped` (when given), each with `why`."""
    from microcoder_jax import config as config_lib

    out = []
    total = summary["step_serial_s"]
    by = {t.name: t for t in times}
    rl_config = config_lib.rl_config_of(config)
    if not rl_config.packing and not profile.is_cap and "train step" in by:
        packed = packed_times(plan, config, profile)
        now = sum(by[n].serial_s for n in ("train step", "old log-probs") if n in by)
        new = sum(packed[n]["compute_s"] + packed[n]["ici_s"] for n in ("train step", "old log-probs"))
        out.append(
            dict(
                change="pack the training passes",
                flags="--config.rl.packing=true",
                saving_s=now - new,
                overrides={"rl.packing": True},
            )
        )
    decode = by.get("sample decode")
    dec_row = next((r for r in plan.rows if r.program.name == "sample decode"), None)
    if decode is not None and dec_row is not None and paged.is_paged(dec_row.program):
        shape, mc = dec_row.program.kwargs["shape"], dec_row.program.model_config

        def decode_cut(change: str, key: str, value, **changed):  # one config change, its decode re-timed
            alt = _decode_with(plan, config, profile, dec_row, **changed)
            flags, saving = f"--config.{key}={value}", decode.serial_s - alt
            out.append(dict(change=change, flags=flags, saving_s=saving, overrides={key: value}))

        if shape.kv_dtype != "int8":
            decode_cut("int8 KV pool", "sampling.kv_dtype", "int8", kv_dtype="int8")
        if mc.lora_rank and mc.lora_decode == "merged":  # the planner's choice: merged or unmerged decode
            model = mc.replace(lora_decode="unmerged")
            decode_cut("unmerged LoRA decode (the stored base + (x A) B)", "lora.decode", "unmerged", model=model)
        if shape.slots * 2 <= shape.rows:
            n = shape.slots * 2
            decode_cut(f"a larger decode batch ({n} slots)", "sampling.slots", n, slots=n)
    for s in splits or []:
        sides = [side for side in ("rollout", "learner") if not s[side]["fits"]]
        out.append(
            dict(
                change=f"split {s['layout']} (one-step off-policy)",
                flags=s["flags"],
                saving_s=s["synchronous_s"] - s["pipelined_s"],
                does_not_fit=" and ".join(f"the {side} side" for side in sides) + " does not fit" if sides else "",
            )
        )
    offered = []
    for c in out:
        c["share_of_step"] = c["saving_s"] / total if total else float("nan")
        why = c.pop("does_not_fit", "") or _grows_past_the_chip(plan, config, c.pop("overrides", {}))
        if c["saving_s"] <= 0:
            why = (why + "; " if why else "") + f"slower by {-c['saving_s']:.1f} s"
        if why:
            c["why"] = why
            if dropped is not None:
                dropped.append(c)
        else:
            offered.append(c)
    return sorted(offered, key=lambda c: -c["saving_s"])


def _grows_past_the_chip(plan, config, overrides: dict) -> str:
    """ "" when `overrides` keep every program within the chip (the analytic model: a program's
    estimate fits, or does not grow), else which programs would not fit."""
    if not overrides:
        return ""
    from microcoder_jax.plan import planner
    from microcoder_jax.plan.programs import with_overrides
    from microcoder_jax.plan.topologies import HEADROOM

    try:
        alt = planner.plan(with_overrides(config, **overrides), plan.topology, search=False, compile_=False)
    except (ValueError, KeyError) as e:
        return f"does not build ({str(e).splitlines()[0][:80]})"
    before = {r.program.name: r.estimate.total + r.resident for r in plan.rows}
    limit = HEADROOM * plan.topology.chip.hbm_bytes
    over = [
        r.program.name
        for r in alt.rows
        if r.program.name in before and r.estimate.total + r.resident > max(limit, before[r.program.name])
    ]
    return f"{', '.join(over)} would not fit (analytic)" if over else ""


STEADY_BATCHES = 4  # partial rollouts' decode: batches simulated back to back (one tail over all of them)


def schedule_for(shape, profile, prompts: int, seed: int, batches: int = 1):
    """The engine's simulated schedule for `batches` batches of `prompts` x G rows of this length
    profile queued back to back (1: one call; more: partial rollouts, decode_sim.steady_steps)."""
    group, cap = shape.samples, shape.max_new
    return decode_sim.simulate(
        np.concatenate([profile.responses(prompts * group, cap, seed + 2 * b) for b in range(batches)]),
        np.concatenate([profile.prompts(prompts, shape.prompt_width, seed + 2 * b + 1) for b in range(batches)]),
        group=group,
        slots=shape.slots,
        page_size=shape.page_size,
        refill_every=shape.refill_every,
        max_new=cap,
        prompt_width=shape.prompt_width,
        block=shape.block_pages * shape.page_size,
    )


def decode_schedules(shape, config, profile, prompts: int, first_width: int, seed: int = 0, batches: int = 1):
    """The simulated schedules of one step's paged decode calls: one call (`batches` back to back
    for partial rollouts), or a multi-turn session's turns (`held_schedules`)."""
    if shape.hold and config.env.max_turns > 1:
        e = config.env
        return held_schedules(shape, profile, prompts, first_width, e.max_turns, e.feedback_tokens, seed)
    return [schedule_for(shape, profile, prompts, seed, batches)]


def held_schedules(shape, profile, prompts: int, first_width: int, turns: int, feedback: int, seed: int):
    """A multi-turn session's decode schedules, one per turn (trainer/episodes.py HeldTurns):
    turn 0 the prompts' G samples; turn t >= 1 one answer per row, after a context of its prompt,
    its earlier answers and `feedback` tokens a turn (the env.feedback_tokens bound). Every episode
    uses every turn, and the turns run one after another (the session overlaps them): an upper
    bound on the work. The pool never delays an admission: the session holds at most
    `sampling.episodes_in_flight` episodes, its pool sized for them, so the simulator's default
    pool (every prompt and S sequences) stands in for it."""
    g, cap, n = shape.samples, shape.max_new, prompts * shape.samples
    sim = dict(
        slots=shape.slots,
        page_size=shape.page_size,
        refill_every=shape.refill_every,
        max_new=cap,
        prompt_width=shape.prompt_width,
        block=shape.block_pages * shape.page_size,
    )
    first = profile.prompts(prompts, first_width, seed + 1)
    answers = profile.responses(n, cap, seed)
    out = [decode_sim.simulate(answers, first, group=g, **sim)]
    context = np.repeat(first, g) + answers
    for t in range(1, turns):
        context = context + feedback
        answers = profile.responses(n, cap, seed + 2 * t)
        out.append(decode_sim.simulate(answers, np.minimum(context, shape.prompt_width), group=1, **sim))
        context = context + answers
    return out


def _decode_with(plan, config, profile, row, model=None, **changes) -> float:
    """The sample decode's serial seconds with the engine shape changed (kv_dtype, slots) or another
    model config (`model`, e.g. lora_decode)."""
    p = row.program if model is None else dataclasses.replace(row.program, model_config=model)
    shape = dataclasses.replace(p.kwargs["shape"], **changes)
    if "slots" in changes and not shape.hold:  # a multi-turn session's pool does not follow the slots
        from microcoder_jax.sampling import paged_engine as engine

        shape = dataclasses.replace(
            shape,
            num_pages=engine.default_num_pages(
                shape.max_prompts, shape.prompt_width, shape.slots, shape.max_new, shape.page_size
            ),
        )
    prog = dataclasses.replace(p, kwargs=dict(p.kwargs, shape=shape))
    batches = STEADY_BATCHES if config.train.partial_rollouts else 1
    prompts = plan.shapes.prompts
    sched = decode_schedules(shape, config, profile, prompts, plan.shapes.prompt_width, 0, batches)
    terms = [decode_terms(prog, one) for one in sched]
    compute, hbm = _seconds(sum(f for f, _ in terms) / batches, sum(b for _, b in terms) / batches, plan.topology)
    return max(compute, hbm)


# ------------------------------------------------------------------------------ split layouts


def rollout_devices(config, devices: int) -> int:
    """The rollout worker's devices of `devices` under `mesh.rollout_devices` (a count, or a
    fraction of the devices below 1), as the trainer splits them (sharding.split_devices); 0 when
    the config has no such knob, leaves it at 0 (one mesh for both roles) or leaves a role none."""
    from microcoder_jax import sharding

    value = config.mesh.get("rollout_devices", 0) if hasattr(config.mesh, "get") else 0
    try:
        rollout, _ = sharding.split_devices(value, range(devices))
    except ValueError:  # every device, or none, to the rollout worker: no split of the config's own
        return 0
    return len(rollout)


def split_layouts(topology, config=None) -> list[tuple[str, object, object, str]]:
    """(label, rollout topology, learner topology, link) for the splits to plan on `topology`: the
    config's own (`mesh.rollout_devices`), a slice halved (ICI between the halves), or two slices
    one role each (DCN)."""
    from microcoder_jax.plan.topologies import Topology, parse_topology

    family = topology.chip.name.split()[-1].lower()
    if not topology.chip.tpu:
        return []
    own = rollout_devices(config, topology.num_devices) if config is not None else 0
    if 0 < own < topology.num_devices:
        side = lambda n: Topology(f"{n} x {topology.chip.name}", topology.chip, n, None)  # noqa: E731
        link = "DCN" if topology.slices > 1 and own % (topology.num_devices // topology.slices) == 0 else "ICI"
        return [
            (
                f"{topology.name} as {own}+{topology.num_devices - own} chips (mesh.rollout_devices)",
                side(own),
                side(topology.num_devices - own),
                link,
            )
        ]
    per_slice = topology.num_devices // topology.slices
    cores = topology.chip.cores_per_chip
    if topology.slices == 2:
        one = parse_topology(f"{family}-{per_slice * cores}")
        return [(f"{topology.name} as one slice each", one, one, "DCN")]
    if per_slice < 2:
        return []
    try:
        half = parse_topology(f"{family}-{per_slice // 2 * cores}")
    except ValueError:
        return []
    n = per_slice // 2
    return [(f"{topology.name} as {n}+{n} chips", half, half, "ICI")]


def transfer_bytes(mc) -> int:
    """Bytes a weight sync moves each step: every weight at 2 bytes (the split layouts' figure for
    full fine-tuning), or under LoRA the float32 adapters only (trainer/worker.py moves the frozen
    base once, at the first sync, and never again)."""
    return mc.num_adapter_params() * 4 if mc.lora_rank else mc.num_params() * 2


def split_plan(
    config, topology, profile, plan_fn, label, rollout_topo, learner_topo, link, synchronous_s: float
) -> dict:
    """Each side planned on its own chips (analytic), the weight transfer, and the pipelined
    (one-step off-policy: max of the two sides + the transfer) against the synchronous step."""
    sides = {}
    for side, topo, names in (
        ("rollout", rollout_topo, PHASES["sampling"]),
        ("learner", learner_topo, PHASES["old log-probs"] + PHASES["train"]),
    ):
        sub = plan_fn(config, topo, compile_=False, search=False)
        keep = [r for r in sub.rows if r.program.name in names]
        sub.rows = keep
        times = program_times(sub, config, profile)
        sides[side] = dict(
            topology=topo.name,
            chips=topo.num_devices,
            seconds=sum(t.serial_s for t in times),
            fits=all(sub.verdict(r) == "fits" for r in keep),
        )
    mc = plan_fn(config, rollout_topo, compile_=False, search=False, only=("decode layout",)).model_config
    weights = transfer_bytes(mc)
    per_chip = weights / rollout_topo.num_devices
    bw = topology.chip.dcn_bandwidth if link == "DCN" else topology.chip.ici_bandwidth
    transfer = per_chip / bw if bw else float("nan")
    pipelined = max(sides["rollout"]["seconds"], sides["learner"]["seconds"]) + transfer
    return dict(
        layout=label,
        link=link,
        rollout=sides["rollout"],
        learner=sides["learner"],
        transfer_bytes=weights,
        transfer_bytes_per_chip=per_chip,
        transfer_s=transfer,
        pipelined_s=pipelined,
        synchronous_s=synchronous_s,
        flags=f"--config.mesh.rollout_devices={rollout_topo.num_devices} --config.train.off_policy_steps=1",
        recommend="split"
        if pipelined < 0.95 * synchronous_s and sides["rollout"]["fits"] and sides["learner"]["fits"]
        else "synchronous",
    )
