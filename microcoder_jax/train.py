"""`python -m microcoder_jax.train`: the RL training run (the code is `microcoder_jax.trainer.loop`)."""

import sys

from microcoder_jax.trainer.loop import main, train  # noqa: F401 (train re-exported)

if __name__ == "__main__":
    sys.exit(main())
