"""`python -m microcoder_jax.evaluate`: the old name of `python -m microcoder_jax.evaluator` (judge a
file of solutions), kept working for one release; `eval` scores a checkpoint, `evaluator` judges."""

import sys

from microcoder_jax.evaluator.cli import main

if __name__ == "__main__":
    sys.exit(main())
