"""`python -m microcoder_jax.convert`: Hugging Face <-> Orbax checkpoint conversion.

The code is `microcoder_jax.models.convert`.
"""

import sys

from microcoder_jax.models.convert import main

if __name__ == "__main__":
    sys.exit(main())
