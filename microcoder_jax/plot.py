"""`python -m microcoder_jax.plot`: PNG plots of a run's curves (the code is `microcoder_jax.trainer.plot`)."""

import sys

from microcoder_jax.trainer.plot import main

if __name__ == "__main__":
    sys.exit(main())
