"""Judging each group as the paged sampler finishes it, against judging all rows after sampling.

    python benchmarks/judge_overlap.py --workdir=runs/demo [--reps 6] [--slots 0] [--config.KEY=VALUE ...]

On a demo run's newest checkpoint (`python -m microcoder_jax.train --workdir=DIR` first) and its
prompt batches, alternates the two ways of collecting one rollout with the paged engine: the
trainer's (`rollout.collect`: groups submitted from `on_group_done`) and the sequential one
(sample, then submit every row). Both give the same rows and rewards (checked). Prints the median
seconds per rollout of sampling, judging after sampling, time blocked on the pool, and the total.
On a CPU-only machine the sampler and the judge share the cores, so little can overlap there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import numpy as np

from microcoder_jax import cli
from microcoder_jax import config as config_lib
from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.judge.pool import JudgePool
from microcoder_jax.trainer.learner import logprobs
from microcoder_jax.trainer.rollout import GroupJudge, finish, generate, rows_of, start
from microcoder_jax.trainer.setup import key, setup, start_state


def sequential(run, pool, params, problems, prompts, rng, times):
    """Sample every row, then judge them: what collect did before groups were judged as they finished."""
    c = run.config
    judge = GroupJudge(run, pool, problems, c.sampling.group_size)
    t0 = time.perf_counter()
    sample = generate(
        run,
        params,
        prompts,
        num_samples=c.sampling.group_size,
        temperature=1.0,
        max_new_tokens=c.sampling.max_new_tokens,
        top_p=1.0,
        top_k=0,
        rng=rng,
    )
    times["sample"] += time.perf_counter() - t0
    judge.add(0, sample)
    return judge, sample


def judged(run, params, judge, sample, times):
    """The learner's old log-probs dispatched while the pool judges (as the loop does), then the
    verdicts; returns the rollout once both are done."""
    rows = rows_of(sample)
    old = logprobs(run, params, rows["tokens"], rows["attention_mask"], rows["temperature"])
    rollout = finish(run, judge, sample, times=times)[0]
    jax.block_until_ready(old)
    return rollout


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--slots", type=int, default=0)
    args, rest = parser.parse_known_args(argv)
    config = cli.parse(rest, prog="judge_overlap", doc=__doc__, default_file=config_lib.DEFAULT_FILE).config
    config.sampling.engine, config.sampling.slots = "paged", args.slots
    run = setup(config, args.workdir)
    ckpt = Checkpointer(f"{args.workdir}/checkpoints")
    params = start_state(run, ckpt, lambda *a: None).state.params
    ckpt.close()
    n = config.data.num_prompts
    results = {"overlapped": [], "sequential": []}
    with JudgePool(
        workers=config.judge.workers or None, timeout=config.judge.timeout, memory_mb=config.judge.memory_mb
    ) as pool:
        for rep in range(args.reps + 1):  # rep 0 compiles both
            lo = rep * n % max(1, len(run.prompt_set.prompts) - n)
            problems, prompts = run.prompt_set.problems[lo : lo + n], run.prompt_set.prompts[lo : lo + n]
            rng = key(config.seed, 9, rep)
            rollouts = {}
            for name in ("overlapped", "sequential") if rep % 2 else ("sequential", "overlapped"):
                times = {"sample": 0.0, "judge": 0.0, "judge_wait": 0.0}
                t0 = time.perf_counter()
                if name == "overlapped":
                    judge, sample = start(run, pool, params, problems, prompts, temperature=1.0, rng=rng, times=times)
                else:
                    judge, sample = sequential(run, pool, params, problems, prompts, rng, times)
                rollouts[name] = judged(run, params, judge, sample, times)
                times["total"] = time.perf_counter() - t0
                if rep:
                    results[name].append(times)
            np.testing.assert_array_equal(rollouts["overlapped"].rewards, rollouts["sequential"].rewards)
            np.testing.assert_array_equal(rollouts["overlapped"].tokens, rollouts["sequential"].tokens)
    rows = n * config.sampling.group_size
    print(
        f"paged engine, {rows} rows ({n} prompts x {config.sampling.group_size}), slots="
        f"{args.slots or 'all'}, {args.reps} rollouts each, median seconds; rewards equal row by row"
    )
    print(f"{'':12} {'sample':>8} {'judge':>8} {'judge_wait':>11} {'total':>8}")
    for name, reps in results.items():
        med = {k: statistics.median(t[k] for t in reps) for k in ("sample", "judge", "judge_wait", "total")}
        print(f"{name:12} {med['sample']:8.3f} {med['judge']:8.3f} {med['judge_wait']:11.3f} {med['total']:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
