"""`python -m microcoder_jax.evaluator`: judge a file of solutions against problems (evaluator/cli.py)."""

import sys

from microcoder_jax.evaluator.cli import main

if __name__ == "__main__":
    sys.exit(main())
