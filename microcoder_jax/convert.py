"""`python -m microcoder_jax.convert`: Hugging Face <-> Orbax checkpoint conversion, GGUF import, and
a training run's model (a LoRA run's merged model or PEFT adapter).

The code is `microcoder_jax.trainer.convert` (the command line) over `models/` (the files) and
`trainer/export_run.py` (what a run's workdir holds).
"""

import sys

from microcoder_jax.trainer.convert import main

if __name__ == "__main__":
    sys.exit(main())
