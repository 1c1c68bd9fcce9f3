"""Partial rollouts against one sampler call per step: the paged engine's slot utilisation, counted.

Both sides decode the same batches (prompts x G rows each, lengths drawn from a long-tailed
distribution: lognormal with a median of cap / 6 and 10% of the rows at the cap; the partial side
may start EXTRA more, as a run's prompt stream goes on past any step) on the paged
engine with S slots, on a tiny random Qwen3: every row runs to its drawn length (no stop token), so
the counts do not depend on the weights or on this machine's load.

* per step (today, `train.partial_rollouts=False`): one `generate_paged` call per batch; the batch's
  last rows decode in emptying slots (the tail shrinks S, but each step still reads the weights).
* partial (`train.partial_rollouts=True`): one session across batches with the worker's own push rule
  (`trainer.partial.should_push`); a batch is handed on when `prompts` groups have finished and the
  weights version is bumped (`set_params`), the rows still running continue.
* partial, KV recomputed (`train.partial_recompute=True`): the same, and at each hand-off the rows
  still running prefill their prompt and tokens again (counted: tokens prefilled again).

Printed per side: decode steps per batch, slot utilisation (live slot-steps / (decode steps x S):
how full the engine ran), against the floor of tokens / S; for the partial side also the token ages
(batches between the weights that drew a token and the hand-off). The planner's steady-state model
(`plan.decode_sim.steady_steps`: the same batches queued back to back in one call, with one tail
at the end: an upper bound) is printed beside the engine's partial count.

    python benchmarks/partial_rollouts.py                 # 8 batches of 16 x 8 rows, S = 64, cap 192
    python benchmarks/partial_rollouts.py --batches 4 --slots 32
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

NO_STOP = [10**6]  # never sampled: rows end at their drawn length
EXTRA = 4  # batches beyond the measured ones that partial rollouts may start (a run's stream goes on)


def long_tail(rows: int, cap: int, rng) -> np.ndarray:
    """Lengths: lognormal, median cap / 6, sigma 0.8, clipped below the cap; then 10% of rows at the cap."""
    lengths = np.clip(np.ceil(rng.lognormal(np.log(cap / 6), 0.8, rows)), 1, cap - 1).astype(np.int32)
    lengths[rng.random(rows) < 0.10] = cap
    return lengths


def workload(args):
    rng = np.random.default_rng(args.seed)
    rows = args.prompts * args.group
    batches = args.batches + EXTRA  # the stream goes on: partial rollouts push past the last batch measured
    prompts = [
        [rng.integers(3, 120, size=int(rng.integers(4, 30))).tolist() for _ in range(args.prompts)]
        for _ in range(batches)
    ]
    return prompts, [long_tail(rows, args.cap, rng) for _ in range(batches)]


def per_step(params, config, prompts, lengths, args) -> dict:
    from microcoder_jax.sampling.paged_sampler import generate_paged

    import jax

    total = {"steps": 0, "live_slot_steps": 0}
    for b, (ps, caps) in enumerate(zip(prompts[: args.batches], lengths[: args.batches])):
        stats: dict = {}
        generate_paged(
            params,
            config,
            ps,
            num_samples=args.group,
            temperature=1.0,
            max_new_tokens=args.cap,
            stop_token_ids=NO_STOP,
            pad_id=0,
            rng=jax.random.key(b),
            slots=args.slots,
            caps=caps,
            prompt_buckets=(32,),
            stats=stats,
        )
        total["steps"] += stats["steps"]
        total["live_slot_steps"] += stats["live_slot_steps"]
    return total


def partial(params, config, prompts, lengths, args, recompute: bool = False) -> dict:
    import jax

    from microcoder_jax.sampling.paged_sampler import PagedSession
    from microcoder_jax.trainer.partial import should_push
    from microcoder_jax.trainer.step_batch import PARTIAL_BATCHES

    n, g = args.prompts, args.group
    session = PagedSession(
        params,
        config,
        num_samples=g,
        max_prompts=PARTIAL_BATCHES * n,
        max_new_tokens=args.cap,
        prompt_width=32,
        stop_token_ids=NO_STOP,
        pad_id=0,
        rng=jax.random.key(0),
        slots=args.slots,
    )
    every = max(4, args.cap // 16)  # the worker's report_every
    pushed, handed, finished, ages = 0, 0, [], []
    while handed < args.batches:
        while len(finished) >= n and handed < args.batches:  # hand a batch on, bump the weights version
            batch, finished = finished[:n], finished[n:]
            ages += [handed - v for out in batch for v in out.versions[out.versions >= 0].ravel()]
            handed += 1
            session.set_params(params, handed, recompute=recompute)
        if handed == args.batches:
            break
        while pushed < len(prompts) and should_push(session, n):
            session.push(prompts[pushed], temperature=1.0, caps=lengths[pushed])
            pushed += 1
        done = session.run(every)
        for p in done:
            out = session.output([p])
            written = np.arange(out.versions.shape[1])[None, :] < out.lengths[:, None]
            out.versions[~written] = -1
            finished.append(out)
        session.retire(done)
    stats = session.stats()
    session.close()
    age = np.asarray(ages)
    return {
        "steps": stats["steps"],
        "live_slot_steps": stats["live_slot_steps"],
        "token_age_mean": float(age.mean()),
        "stale_token_frac": float((age > 0).mean()),
        "token_age_max": int(age.max()),
        "recomputed": stats["recomputed"],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--prompts", type=int, default=16, help="prompts per batch")
    p.add_argument("--group", type=int, default=8, help="G")
    p.add_argument("--slots", type=int, default=64, help="S")
    p.add_argument("--cap", type=int, default=192, help="response cap (max_new_tokens)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the numbers here")
    args = p.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    from microcoder_jax.models import init_params
    from microcoder_jax.models.presets import get_preset
    from microcoder_jax.plan import decode_sim

    config = get_preset("tiny", dtype="float32")
    params = init_params(config, jax.random.key(0))
    prompts, lengths = workload(args)
    tokens = int(sum(x.sum() for x in lengths[: args.batches]))
    floor = tokens / args.slots / args.batches
    sides = {"per step (today)": per_step(params, config, prompts, lengths, args)}
    sides["partial rollouts"] = partial(params, config, prompts, lengths, args)
    sides["partial, KV recomputed"] = partial(params, config, prompts, lengths, args, recompute=True)
    measured = slice(0, args.batches)
    steady = decode_sim.steady_steps(
        np.concatenate(lengths[measured]),
        [len(q) for ps in prompts[measured] for q in ps],
        group=args.group,
        slots=args.slots,
    )
    print(
        f"{args.batches} batches of {args.prompts} x {args.group} rows, S = {args.slots}, cap {args.cap}: "
        f"{tokens} tokens, {(np.concatenate(lengths) == args.cap).mean():.1%} of rows at the cap; "
        f"floor {floor:.1f} decode steps per batch (tokens / S)"
    )
    print("| side | decode steps per batch | slot utilisation | vs floor |")
    print("|---|---|---|---|")
    for name, s in sides.items():
        s["steps_per_batch"] = s["steps"] / args.batches
        s["utilisation"] = s["live_slot_steps"] / (s["steps"] * args.slots)
        print(f"| {name} | {s['steps_per_batch']:.1f} | {s['utilisation']:.1%} | {s['steps_per_batch'] / floor:.2f}x |")
    part = sides["partial rollouts"]
    print(
        f"partial rollouts: token age mean {part['token_age_mean']:.2f} batches, max {part['token_age_max']}, "
        f"{part['stale_token_frac']:.1%} of tokens drawn by older weights; planner steady state "
        f"{steady / args.batches:.1f} decode steps per batch (engine: {part['steps_per_batch']:.1f})"
    )
    again = sides["partial, KV recomputed"]
    print(
        f"KV recomputed at each hand-off: {again['recomputed'] / args.batches:.0f} tokens prefilled again per "
        f"batch ({again['recomputed'] / tokens:.1%} of a batch's generated tokens), "
        f"the same decode steps ({again['steps_per_batch']:.1f})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"args": vars(args), "floor": floor, "steady": steady / args.batches, "sides": sides}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
