"""`python -m microcoder_jax.experiments.temperature --out DIR [--seeds N] [--steps S] [--short]`

The paper's temperature comparison on the CPU truncation task with MicroCoder's rule
(configs/truncation_task.py:conditional_0.1): constant temperatures 0.6, 1.0 and 1.4 against the
diversity policy (probe the ladder 0.6..1.8 on the first batch, then move one stage when the group
diversity leaves the band 0.55-0.75; window and interval scaled to the short run). Writes
DIR/summary.json (with each run's temperature path), DIR/table.md and DIR/curves.png.
"""

from __future__ import annotations

import sys

from microcoder_jax.experiments import common, figure

RULE = "conditional_0.1"
# The diversity policy's band and ladder are the method's defaults (docs/method.md); its window
# (10) and interval (20) are for 300-step runs and are scaled down to this one's few dozen steps.
DIVERSITY = (
    "temperature.policy=diversity",
    "temperature.temperature=1.0",
    "temperature.window=5",
    "temperature.min_interval=10",
)
ARMS = (
    *(
        common.Arm(
            f"T{t}", RULE, ("temperature.policy=constant", f"temperature.temperature={t}"), label=f"constant T={t}"
        )
        for t in (0.6, 1.0, 1.4)
    ),
    common.Arm("diversity", RULE, DIVERSITY, label="diversity policy"),
)
KEYS = ("reward_mean", "response_length_mean", "truncation_rate", "diversity", "temperature")


def main(argv=None) -> int:
    return common.run_experiment(
        "temperature",
        __doc__,
        argv,
        ARMS,
        draw=figure.draw,
        keys=KEYS,
        title=f"Sampling temperature on the CPU truncation task ({RULE}, {{seeds}} seeds)",
        meta={"rule": RULE},
        columns=("reward", "length", "truncation", "diversity", "temperature"),
    )


if __name__ == "__main__":
    sys.exit(main())
