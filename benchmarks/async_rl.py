"""Synchronous against one-step off-policy RL: the demo for N steps with train.off_policy_steps = 0
and = 1 side by side, in one run on one machine, for a few seeds.

    python benchmarks/async_rl.py --out=runs/async_rl [--steps 12] [--seeds 0,1] [--config.KEY=VALUE ...]

Each (k, seed) trains the demo config (k = 1 with rl.is_correction=tis) in its own workdir under
--out; the k = 0 and k = 1 runs of a seed start from the same warm start (it is seeded). RL steps
per second are counted from the end of step 1 to the end of the last step (so neither the warm
start nor the first compile is in them). Prints one JSON line per run and a summary: steps/s of
each k (mean over seeds), the speed-up, and each k's mean reward over the last half of the steps
with its spread over seeds (max - min), the reward curves in the JSON.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

from microcoder_jax import cli
from microcoder_jax import config as config_lib
from microcoder_jax.trainer import loop


def one_run(config, workdir: str) -> dict:
    ends: dict[int, float] = {}
    rewards: list[float] = []

    def on_step(step, record):
        ends[step] = time.perf_counter()
        rewards.append(float(record["reward_mean"]))

    loop.train(config, workdir, log_fn=lambda *a: None, on_step=on_step)
    last = max(ends)
    return {"steps_per_s": (last - 1) / (ends[last] - ends[1]), "rewards": rewards}


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--seeds", default="0,1")
    args, rest = parser.parse_known_args(argv)
    base = cli.parse(rest, prog="async_rl", doc=__doc__, default_file=config_lib.DEFAULT_FILE).config
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[int, list[dict]] = {0: [], 1: []}
    for seed in seeds:
        for k in (0, 1):  # the same machine load for both, seed by seed
            c = copy.deepcopy(base)
            c.seed, c.train.steps, c.train.progress = seed, args.steps, False
            c.train.checkpoint_every, c.train.eval_every = 0, 0
            c.train.off_policy_steps, c.rl.is_correction = k, ("tis" if k else base.rl.is_correction)
            r = one_run(c, os.path.join(args.out, f"k{k}_seed{seed}"))
            r.update(k=k, seed=seed)
            results[k].append(r)
            print(json.dumps(r), flush=True)
    summary = {}
    for k, runs in results.items():
        late = [statistics.mean(r["rewards"][len(r["rewards"]) // 2 :]) for r in runs]
        summary[k] = {
            "steps_per_s": statistics.mean(r["steps_per_s"] for r in runs),
            "late_reward": statistics.mean(late),
            "late_reward_spread": max(late) - min(late),
        }
    summary["speedup"] = summary[1]["steps_per_s"] / summary[0]["steps_per_s"]
    print(json.dumps({"summary": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
