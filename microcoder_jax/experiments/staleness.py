"""`python -m microcoder_jax.experiments.staleness --out DIR [--seeds N] [--steps S] [--short]`

Does one step of staleness cost learning? The CPU truncation task (configs/truncation_task.py,
conditional truncation at rho 0.1, the microcoder preset) trained synchronously (k = 0: every batch
sampled by the policy that trains on it) and one step off-policy (train.off_policy_steps=1: batch t
sampled by the policy after t - 1 updates, while the learner trains on batch t - 1), with the
truncated-IS correction (tis: each token weighs min(pi_old / pi_sampler, 2)) and without one. Same
seeds, warm starts, prompts and evaluation keys in every arm; 6 seeds by default. Writes
DIR/summary.json, DIR/table.md (paired differences from the synchronous arm) and DIR/curves.png.
"""

from __future__ import annotations

import sys

from microcoder_jax.experiments import figure
from microcoder_jax.experiments.cli import run_experiment
from microcoder_jax.experiments.runner import Arm

RULE = "conditional_0.1"
K1 = ("train.off_policy_steps=1",)
HALF_LR = ("rl.learning_rate=3.5e-4",)
PAGED = ("sampling.engine=paged",)
ARMS = (
    Arm("sync", RULE, label="synchronous (k = 0)"),
    Arm("k1_tis", RULE, (*K1, "rl.is_correction=tis"), label="k = 1, tis"),
    Arm("k1_none", RULE, (*K1, "rl.is_correction=none"), label="k = 1, no correction"),
    Arm("sync_half_lr", RULE, HALF_LR, label="synchronous, half lr"),
    Arm("k1_tis_half_lr", RULE, (*K1, "rl.is_correction=tis", *HALF_LR), label="k = 1, tis, half lr"),
    Arm("paged_sync", RULE, PAGED, label="paged engine, synchronous"),
    Arm(
        "paged_partial",
        RULE,
        (*PAGED, "train.partial_rollouts=True", "train.partial_recompute=False"),
        label="partial rollouts, KV kept",
    ),
    Arm(
        "paged_partial_recompute",
        RULE,
        (*PAGED, "train.partial_rollouts=True", "train.partial_recompute=True"),
        label="partial rollouts, KV recomputed",
    ),
)
# the pairs worth reading besides every arm against `sync`
PAIRS = (
    ("k1_tis_half_lr", "sync_half_lr"),
    ("paged_partial", "paged_sync"),
    ("paged_partial_recompute", "paged_partial"),
    ("paged_sync", "sync"),
)
KEYS = ("reward_mean", "response_length_mean", "entropy", "sampler_logprob_gap", "eval_greedy_pass@1", "eval_pass@1")


def main(argv=None) -> int:
    return run_experiment(
        "staleness",
        __doc__,
        argv,
        ARMS,
        draw=figure.draw,
        keys=KEYS,
        title="Stale rollouts on the CPU truncation task (cap {cap} tokens, {seeds})",
        pairs=PAIRS,
    )


if __name__ == "__main__":
    sys.exit(main())
