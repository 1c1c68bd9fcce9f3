"""What fits instead: candidate settings for each program that does not fit, ranked by the
analytic model and confirmed by compiling (at most a few compiles per program)."""

from __future__ import annotations

from microcoder_jax.plan.programs import with_overrides

MAX_COMPILES = 3  # per failing program


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
        if name.endswith("decode"):
            out += _slot_candidates(config, name)
        if config.sampling.engine == "static":
            key = "data.num_prompts" if name.startswith("sample") else "eval.batch_problems"
            prompts = config.data.num_prompts if name.startswith("sample") else config.eval.batch_problems
            while prompts // 2 >= 1:
                prompts //= 2
                out.append((f"{prompts} prompts per sampler call", {key: prompts}))
    tensor = mesh_shape["tensor"] * 2
    if shards >= tensor:
        out.append((f"mesh tensor={tensor}", {"mesh.tensor": tensor, "mesh.fsdp": -1, "mesh.data": 1}))
    return out


def _slot_candidates(config, name: str) -> list[tuple[str, dict]]:
    """Decode: fewer slots of the paged engine (the static engine: switch to it), largest first."""
    from microcoder_jax.plan.paged import engine_shape

    sample = name.startswith("sample")
    prompts = config.data.num_prompts if sample else config.eval.batch_problems
    group = config.sampling.group_size if sample else config.eval.samples
    slots = engine_shape(config, prompts, group, max(config.data.prompt_buckets), 1).slots
    if config.sampling.engine == "static":
        return [
            (f"paged engine, {s} slots", {"sampling.engine": "paged", "sampling.slots": s})
            for s in _halves(slots, include=True)
        ]
    out: list[tuple[str, dict]] = [(f"{s} slots", {"sampling.slots": s}) for s in _halves(slots, include=False)]
    if config.sampling.kv_dtype != "int8":  # the same slots in about half the pool, before fewer slots
        out.insert(0, (f"int8 KV pool, {slots} slots", {"sampling.kv_dtype": "int8"}))
    return out


def _halves(n: int, include: bool) -> list[int]:
    out = [n] if include else []
    while n // 2 >= 1:
        n //= 2
        out.append(n)
    return out


def search(config, topology, result, *, plan, cache_dir, log=lambda *_: None) -> list[str]:
    """One line per program that does not fit: the first candidate that compiles and fits.

    `plan` is `planner.plan` (passed in, so this module does not import the planner back)."""
    lines = []
    hbm = topology.chip.hbm_bytes
    for row in result.rows:
        if result.verdict(row) == "fits":
            continue
        name, found, compiles = row.program.name, None, 0
        for label, changes in candidates(config, name, result.mesh_shape):
            try:
                cand = with_overrides(config, **changes)
                guess = plan(cand, topology, only=(name,), search=False, compile_=False)
            except (ValueError, KeyError) as e:  # e.g. rows no longer split into mini-batches
                log(f"  {name}: {label}: {e}")
                continue
            if guess.rows[0].total > hbm * 1.15:  # the model says far over: do not spend a compile
                continue
            if compiles == MAX_COMPILES or topology.aot_name is None:
                if topology.aot_name is None and guess.verdict(guess.rows[0]) == "fits":
                    found = (label, changes, guess.rows[0].total, "analytic")
                    break
                continue
            compiles += 1
            log(f"  {name}: trying {label} ...")
            real = plan(cand, topology, only=(name,), search=False, cache_dir=cache_dir)
            if real.verdict(real.rows[0]) == "fits":
                found = (label, changes, real.rows[0].total, "compiled")
                break
        if found is None:
            tried = ", ".join(label for label, _ in candidates(config, name, result.mesh_shape))
            lines.append(f"{name}: no candidate fits ({tried} tried or ruled out); use a larger topology")
        else:
            label, changes, total, how = found
            flags = " ".join(f"--config.{k}={v}" for k, v in changes.items())
            note = (
                "  (today's loop samples all of a step's prompts in one call: this is the call size that fits)"
                if "prompts per sampler call" in label
                else ""
            )
            lines.append(
                f"{name}: {label} fits, {total / 2**30:.1f} GiB of {hbm / 2**30:.1f} GiB ({how}): {flags}{note}"
            )
    return lines
