"""`python -m microcoder_jax.experiments.lora --out DIR [--seeds N] [--steps S] [--short]`

Do adapters learn what full fine-tuning learns? The CPU truncation task (configs/truncation_task.py,
conditional truncation at rho 0.1, the microcoder preset) trained with full fine-tuning and with
LoRA rank 8 on all seven projections (alpha 16; the model is 64 wide, so rank 8 is an eighth of
it, as rank 16 is of a 128-wide head block): at full fine-tuning's learning rate, at 4x it (adapters
usually want a larger one), and at 4x with the base stored in int8. Same seeds, warm starts,
prompts and evaluation keys in every arm (a fresh adapter's B is zero, so step 1 starts from the
same model); 6 seeds by default. Writes DIR/summary.json, DIR/table.md (paired differences from
full fine-tuning) and DIR/curves.png.
"""

from __future__ import annotations

import sys

from microcoder_jax.experiments import figure
from microcoder_jax.experiments.cli import run_experiment
from microcoder_jax.experiments.runner import Arm

RULE = "conditional_0.1"
LORA = ("lora.rank=8", "lora.alpha=16.0")
ARMS = (
    Arm("full", RULE, label="full fine-tuning (lr 7e-4)"),
    Arm("lora8", RULE, LORA, label="LoRA r8 (lr 7e-4)"),
    Arm("lora8_lr4x", RULE, (*LORA, "rl.learning_rate=2.8e-3"), label="LoRA r8 (lr 2.8e-3)"),
    Arm(
        "lora8_lr4x_int8",
        RULE,
        (*LORA, "rl.learning_rate=2.8e-3", "lora.base_dtype=int8"),
        label="LoRA r8, int8 base (lr 2.8e-3)",
    ),
)
KEYS = ("reward_mean", "response_length_mean", "truncation_rate", "eval_greedy_pass@1", "eval_pass@1")


def main(argv=None) -> int:
    return run_experiment(
        "lora",
        __doc__,
        argv,
        ARMS,
        draw=figure.draw,
        keys=KEYS,
        title="LoRA against full fine-tuning on the CPU truncation task (cap {cap} tokens, {seeds})",
    )


if __name__ == "__main__":
    sys.exit(main())
