"""The paper's training setting, for one model and one algorithm: `--config=configs/paper.py:MODEL,ALGO`.

    python -m microcoder_jax.train --config=configs/paper.py:qwen3-1.7b,microcoder \
        --workdir=runs/qwen3-1.7b_microcoder --config.model.path=/path/to/Qwen3-1.7B \
        --config.data.train_files="train-*.jsonl" --config.eval.files=lcb_v6.jsonl

MODEL: qwen3-1.7b (Qwen3-1.7B), qwen3-4b (Qwen3-4B-Instruct-2507; half the rows per
forward/backward) or r1-distill-qwen-1.5b (DeepSeek-R1-Distill-Qwen-1.5B, the Qwen2 architecture many
code-RL runs start from; not in the paper). ALGO: the rl preset, i.e. the only block that differs between algorithms:
  microcoder  conditional truncation mask (rho 0.1, m 128), clip 0.2/0.28, token-mean, no KL
  grpo        symmetric clip 0.2, sequence-mean of token-means, k3 KL (beta 0.001) to a frozen reference
  dapo        clip-higher 0.2/0.28, token-mean, soft overlong punishment, dynamic sampling
Setting (docs/method.md): 64 prompts x G=8 per rollout batch, 4K response tokens in training,
constant temperature 1.2, 300 steps, evaluation at 8K; not the paper's, each measured first
(docs/method.md): an int8 page pool and packed training passes. Every key is listed by `train --help`.
"""

from microcoder_jax.config import default_config

MODELS = {  # model-specific knobs: the preset (its shape, when no model.path is given) and memory
    # 1.7B: training FSDP over every chip; the paged sampler decodes 64 of the 512 rows at a time.
    # Fits a v5p-8, v5e-8 or v4-8 as is (`python -m microcoder_jax.plan --topology=v5p-8` compiles
    # every program)
    "qwen3-1.7b": {"model.preset": "qwen3-1.7b", "sampling.slots": 64},
    # 4B: a v5p-8, training with FSDP over 2 chips and tensor parallelism over 2; micro-batch 4
    # splits over the FSDP pair
    "qwen3-4b": {
        "model.preset": "qwen3-4b-instruct-2507",
        "rl.micro_batch_size": 4,
        "mesh.tensor": 2,
        "sampling.slots": 64,
    },
    # R1-Distill-Qwen-1.5B (Qwen2: q/k/v biases, untied head, 2 KV heads, so the sampler's tensor split
    # stops at 2 chips): the paper's setting at its own recommended sampling temperature, 0.6
    "r1-distill-qwen-1.5b": {
        "model.preset": "r1-distill-qwen-1.5b",
        "sampling.slots": 64,
        "temperature.temperature": 0.6,
    },
}
ALGORITHMS = ("microcoder", "grpo", "dapo")


def get_config(arg: str = "qwen3-1.7b,microcoder"):
    model, _, algorithm = (arg or "").partition(",")
    if model not in MODELS or algorithm not in ALGORITHMS:
        raise ValueError(
            f"configs/paper.py:{arg}: expected MODEL,ALGO with MODEL in {sorted(MODELS)} "
            f"and ALGO in {list(ALGORITHMS)}, e.g. configs/paper.py:qwen3-1.7b,microcoder"
        )
    c = default_config()
    # Model: the released checkpoint (config.json + safetensors + tokenizer) in model.path.
    c.model.dtype = "bfloat16"  # compute dtype; params and Adam moments stay float32
    c.model.remat = "full"  # rematerialise each layer: 4K-token responses fit in memory
    # Data: problem files in LiveCodeBench / APPS / our schema (e.g. the dataset pipeline's shards).
    c.data.num_prompts = 64  # paper: 64 prompts per rollout batch (beat 32 and 128)
    c.data.prompt_buckets = (256, 512, 1024, 2048)
    c.data.max_prompt_tokens = 2048
    c.data.enable_thinking = False  # thinking off: answers fit the 4K training budget
    c.sampling.group_size = 8
    c.sampling.max_new_tokens = 4096
    c.sampling.engine = "paged"  # continuous batching over a paged KV cache: S slots, not all 512 rows
    c.sampling.decode_tensor = -1  # the sampler splits KV heads, pool and weights over the chips, not FSDP
    # The planner's two largest cuts, on once they held up on a run (docs/method.md, "Defaults that
    # are not the paper's"): keys and values stored as int8 with a scale per token and head (decode
    # reads half the bytes), and training passes packed with several responses per row.
    c.sampling.kv_dtype = "int8"
    c.rl.packing = True
    c.temperature.policy = "constant"  # 1.2: the paper's stable setting for Qwen3
    c.temperature.temperature = 1.2
    c.rl.preset = algorithm
    c.rl.learning_rate = 1e-6
    c.rl.warmup_steps = 10
    c.rl.decay = "constant"
    c.rl.num_minibatches = 4  # 4 optimizer updates per rollout batch (16 prompts x 8 each)
    c.rl.micro_batch_size = 8  # rows per forward/backward; lower it if memory runs out
    c.train.max_refills = 10  # dapo's dynamic sampling: extra generation batches before topping up
    # synchronous, as the paper trains: each batch sampled by the params that train on it, so no
    # staleness to correct (is_correction=auto picks tis once train.off_policy_steps >= 1 or
    # train.partial_rollouts is set)
    c.train.off_policy_steps = 0
    c.rl.is_correction = "auto"
    c.judge.workers = 0  # all cores
    c.judge.timeout = 6.0
    c.train.steps = 300
    c.train.checkpoint_every = 10
    c.train.keep_checkpoints = 3
    c.train.eval_every = 50
    c.eval.max_new_tokens = 8192  # LiveCodeBench at 8K response tokens
    c.eval.samples = 1
    c.eval.temperature = 0.6
    c.eval.top_p = 0.95
    c.mesh.fsdp = -1  # FSDP over every device
    for key, value in MODELS[model].items():  # (slots and mesh: sized for the slice in the comment)
        group, name = key.split(".")
        c[group][name] = value
    return c
