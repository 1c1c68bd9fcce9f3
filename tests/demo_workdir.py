"""A workdir laid out as the demo writes it (config.json, tokenizer/, checkpoints/N), without
training: random params saved at the given steps. For the CLIs that read a run (eval, convert)."""

import os

import jax
import numpy as np

from microcoder_jax import config as config_lib
from microcoder_jax import models
from microcoder_jax.data import demo_task
from microcoder_jax.models.checkpoint import Checkpointer
from microcoder_jax.trainer.resume import record_config


def make_demo_workdir(workdir: str, steps=(4,), config=None):
    """`workdir` with the demo's config.json and tokenizer and a checkpoint at each of `steps`;
    returns (tokenizer, params)."""
    c = config if config is not None else config_lib.demo_config()
    record_config(workdir, config_lib.to_dict(c), log_fn=lambda m: None)
    d = c.demo
    problems = demo_task.make_problems(d.ops, d.problems_per_op, d.tests_per_problem, c.seed, d.phrasings)
    tokenizer = demo_task.build_tokenizer(problems, d.ops, c.data, d.vocab_size)
    tokenizer.save_pretrained(os.path.join(workdir, "tokenizer"))
    params = models.init_params(models.model_config_from(c, len(tokenizer)), jax.random.PRNGKey(1))
    ck = Checkpointer(os.path.join(workdir, "checkpoints"), keep=None, async_save=False)
    for step in steps:
        ck.save(step, {"params": params, "step": np.int32(step)}, {"step": step})
    ck.close()
    return tokenizer, params
