"""`python -m microcoder_jax.experiments.truncation --out DIR [--seeds N] [--steps S] [--short] [--task smollm2]`

The paper's truncation comparison on the CPU truncation task (configs/truncation_task.py), or with
`--task smollm2` on the real model (configs/smollm2.py: SmolLM2-135M-Instruct on the easy problems,
answers capped at 160 tokens; about 35 minutes a run, so pass e.g. --steps 20 --seeds 1), every
arm with the same loss (the microcoder preset) and a different rule for truncated answers:
grpo (judged like any other: reward 0), overlong_filter (every truncated answer leaves the loss),
conditional masking at rho 0.1 and 0.3, and DAPO's soft overlong punishment; 6 seeds by default.
Every run is scored on held-out problems before RL and every 10 steps (greedy pass@1, pass@1..8 at
T = 1.0). Writes DIR/summary.json, DIR/table.md (with paired differences from grpo and the pass
rate by answer length before RL and at the end) and DIR/curves.png; progress is printed while it
runs.
"""

from __future__ import annotations

import sys

from microcoder_jax.experiments import figure
from microcoder_jax.experiments.cli import run_experiment
from microcoder_jax.experiments.runner import Arm

ARMS = (
    Arm("grpo", "grpo", label="grpo (truncated = reward 0)"),
    Arm("overlong_filter", "overlong_filter", label="overlong filter (mask all)"),
    Arm("conditional_0.1", "conditional_0.1", label="conditional rho=0.1"),
    Arm("conditional_0.3", "conditional_0.3", label="conditional rho=0.3"),
    Arm("soft_overlong", "soft_overlong", label="soft overlong (DAPO)"),
)
# --task: every arm's config file (RULE is the arm's), what the title calls it, overrides of each arm
TASKS = {
    "toy": ("", "the CPU truncation task", ()),
    # held-out pass@1 before RL and at the end only (about 4 minutes each on 2 cores), as
    # experiments.smollm2 scores it: its `reads` run of a seed is this command's conditional_0.1 run
    "smollm2": ("smollm2.py", "SmolLM2-135M-Instruct, easy problems", ("train.eval_every={steps}",)),
}
KEYS = (
    "reward_mean",
    "response_length_mean",
    "truncation_rate",
    "diversity",
    "masked_fraction",
    "eval_greedy_pass@1",
    "eval_pass@1",
)


def main(argv=None) -> int:
    return run_experiment(
        "truncation",
        __doc__,
        argv,
        ARMS,
        draw=figure.draw,
        keys=KEYS,
        title="Truncation rules on {task} (cap {cap} tokens, {seeds})",
        tasks=TASKS,
    )


if __name__ == "__main__":
    sys.exit(main())
