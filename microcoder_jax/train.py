"""`python -m microcoder_jax.train`: the RL training run (the code is `microcoder_jax.trainer.loop`)."""
import sys

from microcoder_jax.trainer.loop import main, train

if __name__ == "__main__":
    sys.exit(main())
