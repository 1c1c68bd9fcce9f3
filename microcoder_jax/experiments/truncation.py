"""`python -m microcoder_jax.experiments.truncation --out DIR [--seeds N] [--steps S] [--short]`

The paper's truncation comparison on the CPU truncation task (configs/truncation_task.py), every
arm with the same loss (the microcoder preset) and a different rule for truncated answers:
grpo (judged like any other: reward 0), overlong_filter (every truncated answer leaves the loss),
conditional masking at rho 0.1 and 0.3, and DAPO's soft overlong punishment. Writes
DIR/summary.json, DIR/table.md and DIR/curves.png (reward, length, truncation, diversity and the
masked fraction against the step); progress is printed while it runs.
"""
from __future__ import annotations

import sys

from microcoder_jax.experiments import common, figure

ARMS = (
    common.Arm("grpo", "grpo", label="grpo (truncated = reward 0)"),
    common.Arm("overlong_filter", "overlong_filter", label="overlong filter (mask all)"),
    common.Arm("conditional_0.1", "conditional_0.1", label="conditional rho=0.1"),
    common.Arm("conditional_0.3", "conditional_0.3", label="conditional rho=0.3"),
    common.Arm("soft_overlong", "soft_overlong", label="soft overlong (DAPO)"),
)
KEYS = ("reward_mean", "response_length_mean", "truncation_rate", "diversity", "masked_fraction")


def main(argv=None) -> int:
    args = common.parse_args(argv, "python -m microcoder_jax.experiments.truncation", __doc__,
                             default_seeds=3, default_steps=40)
    seeds = list(range(args.seeds))
    results = common.run_all(ARMS, seeds, args.steps, args.out, short=args.short,
                             log=lambda m: print(m, flush=True))
    cap = common.run_config(ARMS[0], 0, args.steps, args.short, args.out).sampling.max_new_tokens
    summary = common.summarize(ARMS, results, args.steps, {"experiment": "truncation", "short": args.short,
                                                           "seeds": seeds, "max_new_tokens": cap})

    def fig(results, arms, path, summary):
        figure.draw(results, arms, path, keys=KEYS, cap=cap,
                    title=f"Truncation rules on the CPU truncation task (cap {cap} tokens, {len(seeds)} seeds)")

    common.write_outputs(args.out, summary, results, ARMS, fig)
    print(common.table(summary))
    print(f"wrote {args.out}/summary.json, table.md, curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
