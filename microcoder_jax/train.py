"""`python -m microcoder_jax.train`: the RL training run (the code is `microcoder_jax.trainer.loop`).

Before anything is written it checks the run's memory on a CPU (`plan/host.py`: the planner's
model of one step against the memory available; `train.ignore_memory_check=True` skips the refusal).
"""

import sys

if __name__ == "__main__":  # from the first moment, before JAX loads: a signal in set-up is one line
    from microcoder_jax.trainer import preemption

    preemption.exit_at_once()

from microcoder_jax.plan import host  # noqa: E402
from microcoder_jax.trainer.loop import main as loop_main  # noqa: E402
from microcoder_jax.trainer.loop import train  # noqa: E402, F401 (re-exported)


def main(argv=None) -> int:
    return loop_main(argv, preflight=host.check)


if __name__ == "__main__":
    sys.exit(main())
