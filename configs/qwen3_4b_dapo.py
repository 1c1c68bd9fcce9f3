"""Qwen3-4B-Instruct-2507, DAPO baseline.

    python -m microcoder_jax.train --config configs/qwen3_4b_dapo.py --workdir runs/qwen3_4b_dapo \
        --config.model.path=/path/to/Qwen3-4B-Instruct-2507 --config.data.train_files="train-*.jsonl" \
        --config.eval.files=lcb_v6.jsonl

The paper's setting (`config.paper_config`: 64 prompts x G=8, 4K training responses, T=1.2,
evaluation at 8K). Algorithm: rl preset 'dapo': clip-higher 0.2/0.28, token-mean, soft overlong
punishment, dynamic sampling.
The _microcoder, _grpo and _dapo files of one model differ only in the rl block.
"""
from microcoder_jax.config import paper_config


def get_config():
    c = paper_config()
    c.rl.micro_batch_size = 4  # the 4B model: half the rows per forward/backward
    c.rl.preset = "dapo"
    c.rl.max_refills = 10  # dynamic sampling: extra generation batches before topping up
    return c
