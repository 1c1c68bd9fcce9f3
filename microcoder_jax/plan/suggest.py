"""What fits instead: candidate settings for each program that does not fit, ranked by the
analytic model and confirmed by compiling (at most a few compiles per program)."""

from __future__ import annotations

from microcoder_jax.plan.programs import with_overrides

MAX_COMPILES = 3  # per failing program
# A later turn's work on the static sampler (a fresh call over the whole context) is the paged
# engine's extend and decode in one session: a switch of engine plans it under that name.
SAME_WORK = {"turn prefill": "sample extend", "turn decode": "sample decode"}


def candidates(config, name: str, mesh_shape: dict) -> list[tuple[str, dict]]:
    """(description, config overrides) to try for program `name`, least disruptive first."""
    shards = mesh_shape["data"] * mesh_shape["fsdp"]
    out = []
    if name in ("train step", "old log-probs"):
        micro = config.rl.micro_batch_size
        if micro % shards:  # rows that do not split over the data devices are computed on every one
            out.append((f"micro-batch {shards} (one row per data device)", {"rl.micro_batch_size": shards}))
        while micro // 2 >= 1 and micro // 2 >= shards:
            micro //= 2
            out.append((f"micro-batch {micro}", {"rl.micro_batch_size": micro}))
        if config.model.remat != "full":
            out.append(("remat full", {"model.remat": "full"}))
    else:
        if config.sampling.engine == "paged" and config.sampling.decode_tensor == 0 and shards > 1:
            # the pool and weights split over the chips instead of replicated: training is unchanged
            out.append(("the sampler's KV heads over every chip", {"sampling.decode_tensor": -1}))
        # decode and (paged) admit both hold the page pool: its dtype and its slots size it
        if name.endswith("decode") or (name.endswith("admit") and config.sampling.engine == "paged"):
            out += _slot_candidates(config, name)
        # a multi-turn session holds each episode in flight to its widest turn: fewer episodes in
        # flight (the rest start as others end) or fewer rows shrink its pool
        held = config.sampling.engine == "paged" and name.startswith("sample") and _turns(config) > 1
        if held:
            rows = config.data.num_prompts * config.sampling.group_size
            flying = config.sampling.get("episodes_in_flight", 0) or rows
            while flying // 2 >= config.sampling.group_size:
                flying //= 2
                out.append((f"{flying} episodes in flight", {"sampling.episodes_in_flight": flying}))
        if config.sampling.engine == "static" or held:
            training = not name.startswith("eval")  # sample and later turns: the rollout batch's prompts
            key = "data.num_prompts" if training else "eval.batch_problems"
            prompts = config.data.num_prompts if training else config.eval.batch_problems
            while prompts // 2 >= 1:
                prompts //= 2
                out.append((f"{prompts} prompts per sampler call", {key: prompts}))
    tensor = mesh_shape["tensor"] * 2
    if shards >= tensor:
        out.append((f"mesh tensor={tensor}", {"mesh.tensor": tensor, "mesh.fsdp": -1, "mesh.data": 1}))
    if name in ("train step", "old log-probs"):
        out += _lora_candidates(config)
    return out


LORA_RANK = 16  # the rank the search offers (PEFT's common default range is 8-64)


def _lora_candidates(config) -> list[tuple[str, dict]]:
    """LoRA instead of full fine-tuning, for the training passes, last: it changes what is trained.
    The train state drops from fp32 weights + two Adam moments (12 bytes per weight) to the base in
    the compute dtype (2) or int8 (1) and adapters, and the train step holds no base gradients; the
    sampler's programs shrink by the same resident state, which the line with every change together
    checks. A LoRA run without an int8 base is offered one."""
    lora = config.get("lora")
    if lora is None:
        return []
    if not lora.rank:
        return [
            (f"LoRA rank {LORA_RANK} (adapters, the base frozen in {config.model.dtype})", {"lora.rank": LORA_RANK}),
            (f"LoRA rank {LORA_RANK} on an int8 base", {"lora.rank": LORA_RANK, "lora.base_dtype": "int8"}),
        ]
    return [] if lora.base_dtype == "int8" else [("an int8 base (lora.base_dtype)", {"lora.base_dtype": "int8"})]


def _slot_candidates(config, name: str) -> list[tuple[str, dict]]:
    """Decode: fewer slots of the paged engine (the static engine: switch to it), largest first."""
    from microcoder_jax.plan.paged import engine_shape

    sample = not name.startswith("eval")
    prompts = config.data.num_prompts if sample else config.eval.batch_problems
    group = config.sampling.group_size if sample else config.eval.samples
    slots = engine_shape(config, prompts, group, max(config.data.prompt_buckets), 1).slots
    if config.sampling.engine == "static":
        return [
            (f"paged engine, {s} slots", {"sampling.engine": "paged", "sampling.slots": s})
            for s in _halves(slots, include=True)
        ]
    if config.sampling.kv_dtype == "int8":
        return [(_slots(s), {"sampling.slots": s}) for s in _halves(slots, include=False)]
    # int8 holds the same slots in about half the pool (and reads half the pages): before fewer slots
    return [
        (f"int8 KV pool, {_slots(s)}", {"sampling.kv_dtype": "int8"} | ({} if s == slots else {"sampling.slots": s}))
        for s in _halves(slots, include=True)
    ]


def _slots(n: int) -> str:
    return f"{n} slot" + ("s" if n != 1 else "")


def _halves(n: int, include: bool) -> list[int]:
    out = [n] if include else []
    while n // 2 >= 1:
        n //= 2
        out.append(n)
    return out


def _gib(x) -> str:
    return f"{x / 2**30:.1f} GiB"


def search(config, topology, result, *, plan, cache_dir, log=lambda *_: None) -> list[str]:
    """One line per program that does not fit: the first candidate that fits (compiled on TPU, the
    analytic model elsewhere), or every candidate tried with why it was ruled out; then, when
    something was found, one line with every change together and the flags to paste.

    Programs are searched in the loop's order, each on top of the changes found for the ones
    before it (an int8 pool found for admit may already fit the decode). `plan` is `planner.plan`
    (passed in, so this module does not import the planner back)."""
    from microcoder_jax.plan.topologies import HEADROOM

    lines = []
    hbm = topology.chip.hbm_bytes
    found_all: dict = {}
    sized: dict = {}  # program -> its analytic total when a candidate was found to fit it
    for row in result.rows:
        if result.verdict(row) == "fits":
            continue
        name, found, compiles, tried = row.program.name, None, 0, []
        base = with_overrides(config, **found_all) if found_all else config
        options = candidates(base, name, result.mesh_shape)
        if found_all:  # what fixed the programs before may fix this one too
            options.insert(0, ("the changes above", {}))
        for label, changes in options:
            try:
                cand = with_overrides(base, **changes)
                guess = _program(plan(cand, topology, only=_names(name), search=False, compile_=False), name)
            except (ValueError, KeyError) as e:  # e.g. rows no longer split into mini-batches
                log(f"  {name}: {label}: {e}")
                tried.append(f"{label}: does not build ({str(e).splitlines()[0][:80]})")
                continue
            total = guess.rows[0].total
            if topology.aot_name is None:
                if guess.verdict(guess.rows[0]) == "fits":
                    found, sized[name] = (label, changes, total, "analytic"), total
                    break
                tried.append(f"{label}: {_gib(total)} (analytic)")
                continue
            if total > hbm * 1.15:  # the model says far over: do not spend a compile
                tried.append(f"{label}: {_gib(total)} (analytic, not compiled)")
                continue
            if compiles == MAX_COMPILES:
                tried.append(f"{label}: not compiled ({MAX_COMPILES} compiles spent)")
                continue
            compiles += 1
            log(f"  {name}: trying {label} ...")
            real = _program(plan(cand, topology, only=_names(name), search=False, cache_dir=cache_dir), name)
            if real.verdict(real.rows[0]) == "fits":
                found, sized[name] = (label, changes, real.rows[0].total, "compiled"), total
                break
            tried.append(f"{label}: {_gib(real.rows[0].total)} ({real.verdict(real.rows[0])}, compiled)")
        if found is None:
            why = (
                f"tried, against {_gib(HEADROOM * hbm)} ({HEADROOM:.0%} of {_gib(hbm)}): " + "; ".join(tried)
                if tried
                else "no knob the search tries (int8 pool, slots, micro-batch, remat, mesh) applies to it"
            )
            lines.append(f"{name}: nothing fits ({why}); use a larger topology")
            continue
        label, changes, total, how = found
        found_all.update(changes)
        flags = _flags(changes)
        note = (
            "  (today's loop samples all of a step's prompts in one call: this is the call size that fits)"
            if "prompts per sampler call" in label
            else ""
        )
        lines.append(
            f"{name}: {label} fits, {_gib(total)} of {_gib(hbm)} ({how})" + (f": {flags}" if flags else "") + note
        )
    if found_all:
        before = {r.program.name: r.total for r in result.rows if result.verdict(r) == "fits"}
        for r in result.rows:  # fitted as planned: its analytic size is the bar, not the chip
            if r.program.name in before:
                before[r.program.name] = r.estimate.total + r.resident
        lines.append(_together(config, topology, found_all, plan, before | sized))
    return lines


def _turns(config) -> int:
    from microcoder_jax.envs.config import EnvConfig

    return EnvConfig.from_node(config.env).turns


def _names(name: str) -> tuple:
    """The programs a candidate plans for `name`: itself, or what does its work on another engine."""
    return (name, SAME_WORK[name]) if name in SAME_WORK else (name,)


def _program(guess, name: str):
    """`guess` (a plan of `_names(name)`) with one row: `name`'s, else the one doing its work."""
    rows = [r for r in guess.rows if r.program.name == name] or guess.rows[:1]
    guess.rows = rows
    return guess


def _flags(changes: dict) -> str:
    return " ".join(f"--config.{k}={v}" for k, v in changes.items())


def _together(config, topology, changes: dict, plan, sized: dict) -> str:
    """Every change found, applied at once and checked on every program with the analytic model: a
    program passes when it fits, or when it is no larger than when it was known to fit (`sized`:
    the analytic size of a program that fitted as planned, or of the candidate found for it, which
    on a TPU a compile confirmed; the analytic model is not XLA's figure)."""
    flags = _flags(changes)
    try:
        every = plan(with_overrides(config, **changes), topology, search=False, compile_=False)
    except (ValueError, KeyError) as e:
        return f"together: {flags} does not build ({str(e).splitlines()[0][:100]})"
    bad = [
        r.program.name
        for r in every.rows
        if every.verdict(r) != "fits" and r.total > sized.get(r.program.name, -1) * 1.001
    ]
    how = "the analytic model" + (", each change compiled for its program above" if topology.aot_name else "")
    if bad:
        return f"together: {', '.join(bad)} still does not fit ({how}) with {flags}"
    return f"fits with every change ({how}): add {flags}"
