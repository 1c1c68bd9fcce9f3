"""The planner's printed report: memory per program, loop collectives, analytic vs XLA, time."""

from __future__ import annotations

from microcoder_jax.plan import analytic

GIB = 2**30


def _g(x) -> str:
    return f"{x / GIB:7.2f}"


def _count(c: dict) -> str:
    return ", ".join(f"{n} {kind} ({b / 2**20:.1f} MiB)" for kind, (n, b) in sorted(c.items()))


def memory_table(plan) -> list[str]:
    chip = plan.topology.chip
    lines = [
        f"{'program':<15}{'args':>8}{'temps':>8}{'resident':>9}{'total':>8}{'HBM':>6}"
        f"{'analytic':>10}{'diff':>7}  verdict  (GiB per device; resident = optimizer state / KL "
        "reference alive beside it; paged DAPO: its open session beside the old log-probs; analytic "
        "and diff: the program alone, against XLA's args + temps + outputs, resident left out)"
    ]
    for row in plan.rows:
        c, est = row.compiled, row.estimate
        if c is None:
            lines.append(
                f"{row.program.name:<15}{'-':>8}{'-':>8}{_g(row.resident):>9}{_g(row.total):>8}"
                f"{row.total / chip.hbm_bytes:6.0%}{_g(est.total):>10}{'-':>7}  "
                f"{plan.verdict(row)} (analytic)"
            )
            continue
        if c.error and not c.oom:
            lines.append(f"{row.program.name:<15}  does not compile: {c.error}")
            continue
        diff = row.analytic_error
        args, temps, diff = _g(c.argument_bytes), _g(c.temp_bytes), "-" if diff is None else f"{diff:+.0%}"
        lines.append(
            f"{row.program.name:<15}{args:>8}{temps:>8}{_g(row.resident):>9}{_g(row.total):>8}"
            f"{row.total / chip.hbm_bytes:6.0%}{_g(est.total):>10}{diff:>7}  {plan.verdict(row)}"
            + ("  (XLA: out of memory)" if c.oom else "")
            + (" [cached]" if c.cached else "")
        )
    return lines


def collective_lines(plan) -> list[str]:
    lines = []
    for row in plan.rows:
        c = row.compiled
        if c is None or not c.loops:
            continue
        loops = [lp for lp in c.loops if lp["collectives"]]
        total = analytic.per_step_collective_bytes(c.loops)
        unknown = sum(1 for lp in loops if lp["trip_count"] is None)
        lines.append(
            f"{row.program.name}: {len(loops)} of {len(c.loops)} loops hold collectives; "
            f"{total / GIB:.2f} GiB per device over the program (trip counts multiplied"
            + (f"; {unknown} loops of unknown trip count counted once)" if unknown else ")")
        )
        shown = {}
        for lp in loops:  # identical loops (one per layer or phase) print once, with their number
            key = (lp["trip_count"], lp.get("data_dependent"), _count(lp["collectives"]))
            shown[key] = shown.get(key, 0) + 1
        for (trips, dependent, text), times in shown.items():
            how = (
                "? iterations"
                if trips is None
                else f"<= {trips} iterations, data-dependent"
                if dependent
                else f"{trips} iterations"
            )
            lines.append(f"  {times} x loop ({how}): per iteration {text}")
    return lines


def breakdown_lines(plan) -> list[str]:
    lines = []
    for row in plan.rows:
        est, c = row.estimate, row.compiled
        xla = (
            ""
            if c is None or c.error
            else (
                f"   XLA: args {c.argument_bytes / GIB:.2f} + temps "
                f"{c.temp_bytes / GIB:.2f} + out-alias "
                f"{(c.output_bytes - c.alias_bytes) / GIB:.2f} GiB"
            )
        )
        lines.append(f"{row.program.name}: analytic {est.total / GIB:.2f} GiB{xla}")
        for name, b in est.components.items():
            lines.append(f"  {name:<48}{b / GIB:8.2f}")
    return lines


def kv_dtype_lines(plan) -> list[str]:
    """The paged decode programs at both pool dtypes (`sampling.kv_dtype`), from the analytic model:
    pool bytes, HBM traffic and slots; the time saved is the int8 line under `== step time`."""
    from microcoder_jax.plan.paged import kv_dtype_rows

    rows = kv_dtype_rows(plan)
    if not rows:
        return []
    lines = [
        f"{'program':<15}{'pool GiB':>17}{'HBM GB/dev':>22}{'slots':>13}",
        f"{'':<15}{'model':>9}{'int8':>8}{'model':>12}{'int8':>10}{'model':>7}{'int8':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r['name']:<15}{r['pool_model'] / GIB:9.2f}{r['pool_int8'] / GIB:8.2f}"
            f"{r['hbm_model'] / 1e9:12.1f}{r['hbm_int8'] / 1e9:10.1f}{r['slots']:7d}{r['int8_slots']:6d}"
        )
    lines.append(
        "(HBM GB/dev: one call, every row at the cap; int8: keys and values in int8 plus a float32 scale "
        "per token and head; slots int8 = the slots an int8 pool holds in the model-dtype pool's bytes)"
    )
    return lines


def lora_lines(mc) -> list[str]:
    """What the plan assumes of a LoRA run (`lora.rank` > 0): what is trained and stored, and what
    the train step's FLOPs leave out; nothing for full fine-tuning."""
    if not mc.lora_rank:
        return []
    base = "int8 with float32 per-channel scales" if mc.base_dtype == "int8" else mc.dtype
    return [
        f"LoRA: rank {mc.lora_rank} (alpha {mc.lora_alpha:g}) on {', '.join(mc.lora_targets)}: "
        f"{mc.num_adapter_params() / 1e6:.1f}M float32 adapter params trained, Adam moments of these only; "
        f"the base frozen in {base} (norms in {mc.param_dtype}), no fp32 master, no base gradient",
        "  train step FLOPs: forward + activation gradients + remat's forward through the base, the "
        "adapters' own (x A) B and their gradients; no weight-gradient matmul of the base or head. "
        "Sampling decodes a merged compute-dtype copy: the same cost as without adapters",
    ]


def _micro(sh) -> str:
    """The micro-batch: one number, or the train step's (capped at a mini-batch) and the log-prob pass's."""
    if sh.step_micro == sh.micro:
        return str(sh.micro)
    return f"{sh.step_micro} in the train step (one mini-batch at most), {sh.micro} in the log-prob pass"


def render(plan, config_name: str) -> str:
    t, mc, sh = plan.topology, plan.model_config, plan.shapes
    params = mc.num_params()
    mesh = " ".join(f"{k}={v}" for k, v in plan.mesh_shape.items())
    own = next((dict(r.program.mesh.shape) for r in plan.rows if r.program.mesh is not None), plan.mesh_shape)
    if own != plan.mesh_shape:  # the paged sampler on a mesh of its own (sampling.decode_tensor)
        mesh += "; sampler mesh " + " ".join(f"{k}={v}" for k, v in own.items())
    how = (
        "compiled with libtpu (AOT)"
        if t.aot_name
        else "analytic only (--nocompile)"
        if t.chip.tpu
        else "analytic only (no TPU compiler for this device)"
    )
    attention = plan.attention or mc.attention
    out = [
        f"plan: {config_name} on {t.name}: {t.num_devices} x {t.chip.name}, {t.chip.hbm_bytes / GIB:.1f} GiB "
        f"HBM each; mesh {mesh}; {how}",
        f"model: {params / 1e9:.2f}B params, {mc.num_layers} layers, attention {attention}, remat {mc.remat}; "
        f"rows {sh.rows} (prompts {sh.prompts} x G {sh.group}), sequence {sh.prompt_width} + {sh.max_new}"
        + (f" (episodes: learner rows {sh.seq} wide)" if sh.episode_width else "")
        + ", "
        f"micro-batch {_micro(sh)}; eval {sh.eval_prompts} x {sh.eval_samples} at {sh.eval_max_new} new tokens",
        *lora_lines(mc),
        "",
        "== memory per device",
        *memory_table(plan),
    ]
    coll = collective_lines(plan)
    if coll:
        out += ["", "== collectives inside loops (per device)", *coll]
    copies = [
        f"{r.program.name}: {r.compiled.large_copies} copies inside loops of buffers at least half its "
        "largest argument (layout changes XLA inserted: they run every iteration)"
        for r in plan.rows
        if r.compiled is not None and r.compiled.large_copies
    ]
    if copies:
        out += ["", "== large copies", *copies]
    out += ["", "== analytic breakdown", *breakdown_lines(plan), ""]
    if not t.chip.peak_flops:
        out += ["(no peak FLOP/s or bandwidth for this device: name a chip with --topology to estimate time)", ""]
    kv = kv_dtype_lines(plan)
    if kv:
        out += ["== paged decode at each KV pool dtype (sampling.kv_dtype)", *kv, ""]
    if plan.fits:
        out.append(f"verdict: every program fits {t.name}")
    else:
        bad = [r.program.name for r in plan.rows if plan.verdict(r) != "fits"]
        out.append(f"verdict: does not fit {t.name}: {', '.join(bad)}")
        out += [f"  suggestion: {s}" for s in plan.suggestions]
    return "\n".join(out)


def step_table(times, summary, cut_list, profile, splits=(), dropped=()) -> list[str]:
    """Per program: compute / HBM / collective seconds, the bound, the serial and overlapped time;
    then the step, each phase's share, the ranked cuts (and those not offered: `dropped`, each with
    its `why`) and the split layouts."""
    lines = [
        f"lengths: {profile.describe()}",
        f"{'program':<15}{'calls':>6}{'compute s':>11}{'HBM s':>9}{'coll. s':>9}{'coll. GB':>10}"
        f"{'serial s':>10}{'overlap s':>11}  bound",
    ]
    for t in times:
        lines.append(
            f"{t.name:<15}{t.calls:6d}{t.compute_s:11.2f}{t.hbm_s:9.2f}{t.collective_s:9.2f}"
            f"{t.collective_bytes / 1e9:10.1f}{t.serial_s:10.2f}{t.overlapped_s:11.2f}  {t.bound}"
            + (f"  ({t.note})" if t.note else "")
        )
    lines.append(
        f"step: {summary['step_serial_s']:.1f} s serial (collectives after compute: upper bound), "
        f"{summary['step_overlapped_s']:.1f} s overlapped (lower bound)"
        + (f"; eval counted once per {summary['eval_every']} steps" if summary["eval_every"] else "")
    )
    lines.append("  " + ", ".join(f"{k} {v['share']:.0%}" for k, v in summary["phases"].items()))
    if cut_list:
        lines.append("what would cut the step most (estimated, this profile; each fits):")
        for c in cut_list:
            lines.append(
                f"  {c['change']}: saves {c['saving_s']:.1f} s ({c['share_of_step']:.0%} of the step)  {c['flags']}"
            )
    else:
        lines.append("what would cut the step most: nothing the planner models both fits and saves time")
    for c in dropped:
        lines.append(f"  not offered: {c['change']} ({c['why']})")
    for s in splits:
        lines.append(
            f"split {s['layout']}: rollout {s['rollout']['seconds']:.1f} s on {s['rollout']['chips']} chips"
            f"{'' if s['rollout']['fits'] else ' (does not fit)'}, learner {s['learner']['seconds']:.1f} s "
            f"on {s['learner']['chips']}{'' if s['learner']['fits'] else ' (does not fit)'}; weight transfer "
            f"{s['transfer_bytes'] / 1e9:.1f} GB ({s['transfer_bytes_per_chip'] / 1e9:.2f} GB per chip over "
            f"{s['link']}, ~{s['transfer_s'] * 1e3:.1f} ms, an estimate); pipelined "
            f"{s['pipelined_s']:.1f} s vs synchronous {s['synchronous_s']:.1f} s: {s['recommend']}"
        )
    lines.append(
        "(one time per program, this profile: a roofline, max(FLOPs / peak, HBM bytes / bandwidth) per "
        "call, every loop's trips counted and paged decode at the engine's simulated schedule, plus the "
        "collectives inside loops over the link; an upper bound on speed. Left out: kernel efficiency, "
        "collectives outside loops, the judge's CPU time, host work, the data pipeline, compiles)"
    )
    return lines


def compare_lines(summary, profile, topology) -> list[str]:
    """Planned vs measured seconds per phase for a `run:` profile (metrics.jsonl means)."""
    run = profile.run or {}
    times = run.get("times", {})
    device = run.get("device")
    comparable = device is not None and topology.chip.name.lower().replace(" ", "") in device.lower().replace(" ", "")
    planned = {
        "sample": summary["phases"].get("sampling", {}).get("serial_s"),
        "train": sum(summary["phases"].get(k, {}).get("serial_s", 0.0) for k in ("old log-probs", "train")),
    }
    lines = [f"{'phase':<10}{'planned s':>11}{'measured s':>12}"]
    for phase, key in (("sample", "time_sample_s"), ("train", "time_train_s"), ("step", "time_step_s")):
        plan_s = summary["step_serial_s"] if phase == "step" else planned[phase]
        got = times.get(key)
        lines.append(f"{phase:<10}{plan_s:11.2f}{got if got is not None else float('nan'):12.2f}")
    if not comparable:
        lines.append(
            f"not comparable: the run records {'no accelerator' if device is None else device!r} "
            f"(a CPU run, or one before device_kind was logged), the plan is for {topology.chip.name}; "
            "the lengths it read are used, the times are shown only for reference"
        )
    return lines


def to_json(plan, times, summary, cut_list, profile, splits=(), dropped=()) -> dict:
    """The plan as one JSON object (schema: tests/test_plan_lengths.py)."""
    return {
        "topology": {
            "name": plan.topology.name,
            "chip": plan.topology.chip.name,
            "devices": plan.topology.num_devices,
            "slices": plan.topology.slices,
            "hbm_bytes": plan.topology.chip.hbm_bytes,
            "ici_bandwidth": plan.topology.chip.ici_bandwidth,
        },
        "mesh": plan.mesh_shape,
        "fits": plan.fits,
        "lengths": profile.name,
        "programs": [
            {
                "name": r.program.name,
                "total_bytes": r.total,
                "verdict": plan.verdict(r),
                "compiled": r.compiled is not None,
                "compute_s": t.compute_s,
                "hbm_s": t.hbm_s,
                "collective_s": t.collective_s,
                "collective_bytes": t.collective_bytes,
                "calls": t.calls,
                "serial_s": t.serial_s,
                "overlapped_s": t.overlapped_s,
                "bound": t.bound,
                "note": t.note,
            }
            for r, t in zip(plan.rows, times)
        ],
        "step": summary,
        "cuts": cut_list,
        "cuts_not_offered": list(dropped),
        "splits": list(splits),
        "suggestions": plan.suggestions,
    }
