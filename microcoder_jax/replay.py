"""`python -m microcoder_jax.replay --workdir DIR --step N`: re-run a saved step's train step (the
code is `microcoder_jax.trainer.replay`)."""

import sys

from microcoder_jax.trainer.replay import main, replay  # noqa: F401 (replay re-exported)

if __name__ == "__main__":
    sys.exit(main())
