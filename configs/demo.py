"""The demo: a tiny Qwen3 learns "read a b, print a OP b" from the real judge's rewards on a CPU.

    python -m microcoder_jax.train --config=configs/demo.py --workdir=runs/demo

A 2-layer, 64-wide Qwen3 and a byte-level BPE trained on the task text. A supervised warm start
(train.warm_start_steps) teaches the answer format with operations drawn at random, so the model
starts passing about 1 / len(demo.ops) of the time; RL must teach it to read the operation off the
prompt. Every knob is listed by `python -m microcoder_jax.train --help`; this file is
`config.demo_config()`, which is also what the trainer runs without --config.
"""

from microcoder_jax.config import demo_config


def get_config(arg=None):
    return demo_config()
