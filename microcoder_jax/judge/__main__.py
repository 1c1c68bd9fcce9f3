"""`python -m microcoder_jax.judge`: judge a file of solutions against problems (judge/cli.py)."""

import sys

from microcoder_jax.judge.cli import main

if __name__ == "__main__":
    sys.exit(main())
