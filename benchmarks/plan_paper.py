"""The paper configs on the paper's TPUs: one table of the planner's per-device memory.

    python benchmarks/plan_paper.py [--models 1.7b,4b] [--algos microcoder,grpo,dapo]
        [--topologies v4-8,v5e-8,v5p-8] [--search] [--config.KEY=VALUE ...]

Each cell is a program's total per device (its arguments, temporaries and the optimizer state
alive beside it) from libtpu's AOT compile, in GiB; `!` marks one that does not fit the chip.
Programs shared by configs (the sampler's, the log-prob pass) compile once: results are cached
by the lowered program (`~/.cache/microcoder_jax/plan`), so a rerun prints from the cache.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from microcoder_jax import cli  # noqa: E402
from microcoder_jax.plan import planner, programs  # noqa: E402
from microcoder_jax.plan.topologies import parse_topology  # noqa: E402

MODELS = {"1.7b": ("qwen3-1.7b", "qwen3_1p7b"), "4b": ("qwen3-4b-instruct-2507", "qwen3_4b")}
COLUMNS = (
    "decode layout",
    "sample prefill",
    "sample decode",
    "old log-probs",
    "train step",
    "eval prefill",
    "eval decode",
)


def load(model: str, algo: str, overrides: list[str]):
    """A paper config, configs/paper.py:<model>,<algo>, with `--config.KEY=VALUE` style overrides."""
    preset, _ = MODELS[model]
    return cli.load_config(os.path.join(ROOT, "configs", f"paper.py:{preset.split('-instruct')[0]},{algo}"), overrides)


def _sampler(config) -> str:
    s = config.sampling
    return f"paged, {s.slots or 'auto'} slots" if s.engine == "paged" else "static"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="1.7b,4b")
    parser.add_argument("--algos", default="microcoder,grpo,dapo")
    parser.add_argument("--topologies", default="v4-8,v5e-8,v5p-8")
    parser.add_argument("--search", action="store_true", help="compile candidates for rows that do not fit")
    parser.add_argument("--cache-dir", default=programs.CACHE_DIR)
    args, rest = parser.parse_known_args(argv)
    overrides = [a[len("--config.") :] for a in rest if a.startswith("--config.")]
    header = (
        "| model | rl | topology | mesh (d,f,t) | micro | sampler | "
        + " | ".join(c.replace("prefill", "prefill / admit") for c in COLUMNS)
        + " | analytic vs XLA | verdict |"
    )
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    notes = []
    for algo in args.algos.split(","):  # microcoder first: the baselines reuse its sampler compiles
        for model in args.models.split(","):
            for name in args.topologies.split(","):
                config = load(model, algo, overrides)
                topology = parse_topology(name)
                print(f"planning {model} {algo} on {name} ...", file=sys.stderr, flush=True)
                plan = planner.plan(
                    config,
                    topology,
                    cache_dir=args.cache_dir,
                    search=args.search,
                    log=lambda m: print(m, file=sys.stderr, flush=True),
                )
                rows = {r.program.name: r for r in plan.rows}
                cells = []
                for col in COLUMNS:
                    r = rows.get(col, rows.get(col.replace("prefill", "admit")))  # the paged engine admits
                    if r is None:  # the paged engine (and a sampler without a decode layout) has no reshard
                        cells.append("-")
                        continue
                    if r.error and not r.compiled.oom:
                        cells.append("no compile")
                        notes.append(f"{model} {algo} {name} {col}: {r.error}")
                    else:
                        cells.append(f"{r.total / 2**30:.1f}" + ("" if plan.verdict(r) == "fits" else " !"))
                diffs = [r.analytic_error for r in plan.rows if r.analytic_error is not None and not r.error]
                worst = max(diffs, key=abs) if diffs else float("nan")
                m = plan.mesh_shape
                lines.append(
                    f"| {model} | {algo} | {name} ({topology.chip.hbm_bytes / 2**30:.0f} GiB) | "
                    f"{m['data']},{m['fsdp']},{m['tensor']} | {plan.shapes.micro} | {_sampler(config)} | "
                    + " | ".join(cells)
                    + f" | {worst:+.0%} | {'fits' if plan.fits else 'does not fit'} |"
                )
                notes += [f"{model} {algo} {name}: {s}" for s in plan.suggestions]
                print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    if notes:
        print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
