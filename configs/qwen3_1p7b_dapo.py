"""Qwen3-1.7B, DAPO baseline.

    python -m microcoder_jax.train --config configs/qwen3_1p7b_dapo.py --workdir runs/qwen3_1p7b_dapo \
        --config.model.path=/path/to/Qwen3-1.7B --config.data.train_files=train.jsonl \
        --config.eval.files=lcb_v6.jsonl

The paper's setting for Qwen3-1.7B: 64 prompts x G=8 per rollout batch, 4K response tokens in
training, temperature 1.2, evaluation at 8K. Algorithm: DAPO baseline (rl preset 'dapo'):
clip-higher 0.2/0.28, token-mean, soft overlong punishment, dynamic sampling.
"""
from microcoder_jax.config import default_config


def get_config():
    c = default_config()
    # Model: the released checkpoint (config.json + safetensors + tokenizer) in model.path.
    c.model.path = ""  # set on the command line: --config.model.path=DIR
    c.model.dtype = "bfloat16"  # compute dtype; params and Adam moments stay float32
    c.model.remat = "full"  # rematerialise each layer: 4K-token responses fit in memory
    # Data: problem files in LiveCodeBench / APPS / our schema (e.g. the dataset pipeline's shards).
    c.data.train_files = ()  # --config.data.train_files=a.jsonl,b.jsonl
    c.data.num_prompts = 64  # paper: 64 prompts per rollout batch (beat 32 and 128)
    c.data.prompt_buckets = (256, 512, 1024, 2048)
    c.data.max_prompt_tokens = 2048
    c.data.enable_thinking = False  # thinking off: answers fit the 4K training budget
    # Sampling: G responses per prompt, trained at 4K response tokens.
    c.sampling.group_size = 8
    c.sampling.max_new_tokens = 4096
    # Temperature: constant 1.2, the paper's stable setting for Qwen3.
    c.temperature.policy = "constant"
    c.temperature.temperature = 1.2
    # Algorithm: the only block that differs between the _microcoder, _grpo and _dapo files.
    c.rl.preset = "dapo"
    c.rl.max_refills = 10  # dynamic sampling: extra generation batches before topping up
    c.rl.learning_rate = 1e-6
    c.rl.warmup_steps = 10
    c.rl.decay = "constant"
    c.rl.num_minibatches = 4  # 4 optimizer updates per rollout batch (16 prompts x 8 each)
    c.rl.micro_batch_size = 8  # rows per forward/backward; lower it if memory runs out
    # Judge and schedule.
    c.evaluator.workers = 0  # all cores
    c.evaluator.timeout = 6.0
    c.train.steps = 300
    c.train.checkpoint_every = 10
    c.train.keep_checkpoints = 3
    c.train.eval_every = 50
    # Evaluation: LiveCodeBench at 8K response tokens.
    c.eval.max_new_tokens = 8192
    c.eval.samples = 1
    c.eval.temperature = 0.6
    c.eval.top_p = 0.95
    c.mesh.fsdp = -1  # FSDP over every device
    return c
