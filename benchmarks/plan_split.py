"""Split rollout | learner layouts of the paper configs against the synchronous step, from the
planner's analytic model (no compiles: seconds, not minutes).

    python benchmarks/plan_split.py [--models 1.7b,4b] [--topologies v5e-8,v5p-16,v5e-16,v5e-8x2]
        [--lengths cap,paper] [--config.KEY=VALUE ...]

Per row: the synchronous step on the whole topology (serial: collectives after compute), each
side's time on its own chips, the weight transfer (bf16 decode copy, per receiving chip, over ICI
or DCN: an estimate), the one-step off-policy pipelined step (max of the sides + the transfer) and
the planner's recommendation. A roofline: an upper bound on speed for every figure alike.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from microcoder_jax import cli  # noqa: E402
from microcoder_jax.plan import lengths, planner, timing  # noqa: E402
from microcoder_jax.plan.topologies import parse_topology  # noqa: E402

MODELS = {"1.7b": "qwen3-1.7b", "4b": "qwen3-4b"}


def rows(model: str, topo_name: str, profile_name: str, overrides: list[str]) -> list[str]:
    config = cli.load_config(os.path.join(ROOT, "configs", f"paper.py:{MODELS[model]},microcoder"), overrides)
    topology = parse_topology(topo_name)
    profile = lengths.parse(profile_name)
    full = planner.plan(config, topology, compile_=False, search=False)
    times = timing.program_times(full, config, profile)
    summary = timing.step_summary(full, config, times)
    sync = summary["step_serial_s"] - summary["phases"].get("eval", {}).get("serial_s", 0.0)
    out = []
    for label, roll, learn, link in timing.split_layouts(topology, config):
        s = timing.split_plan(config, topology, profile, planner.plan, label, roll, learn, link, sync)
        fits = lambda side, s=s: "" if s[side]["fits"] else " !"  # noqa: E731
        out.append(
            f"| {model} | {profile_name} | {label} | {sync:.1f} | {s['rollout']['seconds']:.1f}{fits('rollout')}"
            f" | {s['learner']['seconds']:.1f}{fits('learner')} | {s['transfer_bytes_per_chip'] / 1e9:.2f} GB "
            f"/ {link} / {s['transfer_s'] * 1e3:.1f} ms | {s['pipelined_s']:.1f} | "
            f"{sync / s['pipelined_s']:.2f}x | {s['recommend']} |"
        )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="1.7b,4b")
    parser.add_argument("--topologies", default="v5e-8,v5p-16,v5e-16,v5e-8x2")
    parser.add_argument("--lengths", default="cap,paper")
    args, rest = parser.parse_known_args(argv)
    overrides = [a[len("--config.") :] for a in rest if a.startswith("--config.")]
    print(
        "| model | lengths | layout | synchronous s | rollout s | learner s | transfer (per chip / link / s) "
        "| pipelined s | speed-up | planner says |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for profile in args.lengths.split(","):
        for model in args.models.split(","):
            for topo in args.topologies.split(","):
                for line in rows(model, topo, profile, overrides):
                    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
