"""`python -m microcoder_jax.experiments.pool_and_packing --out DIR [--seeds N] [--steps S] [--short]`

Do the planner's two largest cuts change what a run learns? The CPU truncation task
(configs/truncation_task.py, conditional truncation at rho 0.1, the microcoder preset) on the paged
sampler, synchronous, with the float page pool against the int8 pool (`sampling.kv_dtype=int8`:
keys and values stored as int8 with a scale per token and head), packed training passes
(`rl.packing=true`: several responses per row, attention within each). Same seeds, warm
starts, prompts and evaluation keys in every arm; 6 seeds by default. Writes DIR/summary.json,
DIR/table.md (paired differences from the float, padded arm) and DIR/curves.png. The arm
`paged_sync` is the staleness experiment's own: an --out shared with it reuses those runs.
"""

from __future__ import annotations

import sys

from microcoder_jax.experiments import figure
from microcoder_jax.experiments.cli import run_experiment
from microcoder_jax.experiments.runner import Arm

RULE = "conditional_0.1"
PAGED = ("sampling.engine=paged",)
INT8 = ("sampling.kv_dtype=int8",)
PACKED = ("rl.packing=True",)
ARMS = (
    Arm("paged_sync", RULE, PAGED, label="float pool, padded passes"),
    Arm("paged_int8", RULE, (*PAGED, *INT8), label="int8 pool"),
    Arm("paged_packed", RULE, (*PAGED, *PACKED), label="packed passes"),
)
KEYS = ("reward_mean", "response_length_mean", "entropy", "sampler_logprob_gap", "eval_greedy_pass@1", "eval_pass@1")


def main(argv=None) -> int:
    return run_experiment(
        "pool_and_packing",
        __doc__,
        argv,
        ARMS,
        draw=figure.draw,
        keys=KEYS,
        title="The int8 page pool and packing on the CPU truncation task (cap {cap} tokens, {seeds})",
    )


if __name__ == "__main__":
    sys.exit(main())
