"""`python -m microcoder_jax.eval`: score a checkpoint on LiveCodeBench-format problems.

The code is `microcoder_jax.trainer.evaluation`.
"""

import sys

from microcoder_jax.trainer.evaluation import main

if __name__ == "__main__":
    sys.exit(main())
