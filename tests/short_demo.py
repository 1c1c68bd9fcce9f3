"""The demo cut short for end-to-end tests of the loop, and its metrics rows without the timed keys."""

import json
import os

from microcoder_jax import config as config_lib
from microcoder_jax.trainer.replay import is_timed


def short_demo(steps: int, **overrides):
    """The demo config: `steps` RL steps, 30 warm-start steps, 8 prompts, no progress bar, only the
    final checkpoint; `overrides` as {"group.name": value}."""
    c = config_lib.demo_config()
    c.train.steps, c.train.progress, c.train.checkpoint_every = steps, False, 0
    c.train.warm_start_steps, c.data.num_prompts = 30, 8
    for key, value in overrides.items():
        group, name = key.split(".")
        c[group][name] = value
    return c


def untimed_rows(workdir):
    """metrics.jsonl's rows without the keys that hold times (those differ between equal runs)."""
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [{k: v for k, v in json.loads(line).items() if not is_timed(k)} for line in f]
