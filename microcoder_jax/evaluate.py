"""`python -m microcoder_jax.evaluate`: judge a file of solutions against problems.

The code is `microcoder_jax.evaluator.cli`.
"""

import sys

from microcoder_jax.evaluator.cli import main

if __name__ == "__main__":
    sys.exit(main())
