"""`python -m microcoder_jax.convert`: Hugging Face <-> Orbax checkpoint conversion, and a LoRA
run's merged model or PEFT adapter.

The code is `microcoder_jax.models.convert`; this entry point adds what models/ may not import:
the trainer's set-up, which rebuilds a random-init LoRA run's frozen base (seed, demo warm start).
"""

import sys

from microcoder_jax.models import convert


def random_init_base(run_dir: str):
    """A random-init LoRA run's frozen base, rebuilt by the trainer's own set-up (seed, demo warm start)."""
    from microcoder_jax.sharding import MeshConfig
    from microcoder_jax.trainer.replay import saved_config
    from microcoder_jax.trainer.setup import frozen_base, setup

    full = saved_config(run_dir)
    full.train.progress = False
    for name in ("data", "fsdp", "tensor", "rollout_devices"):  # the base alone: any devices will do
        full.mesh[name] = getattr(MeshConfig(), name)
    print(f"convert: rebuilding the run's random-init base (seed {full.seed})", file=sys.stderr)
    return frozen_base(setup(full, run_dir), log_fn=lambda m: print(f"convert: {m}", file=sys.stderr))


def main(argv=None) -> int:
    return convert.main(argv, rebuild_base=random_init_base)


if __name__ == "__main__":
    sys.exit(main())
