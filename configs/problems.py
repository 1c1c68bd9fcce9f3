"""Your model and your problems: RL from a Hugging Face checkpoint on your own JSONL, sized for a CPU.

    python -m microcoder_jax.train --config=configs/problems.py \
        --config.model.path=DIR --config.data.train_files=train.jsonl --workdir=runs/mine

DIR is a Qwen3 / Qwen2 checkpoint folder (config.json, *.safetensors and the tokenizer with its
chat template, e.g. a `huggingface-cli download Qwen/Qwen3-0.6B --local-dir DIR`); the tokenizer
is read from it (`tokenizer.path` to use another). train.jsonl holds one problem per line, e.g.

    {"question_id": "add", "question_content": "Read a and b; print a + b.",
     "tests": [{"input": "1 2\n", "output": "3\n", "kind": "stdin"}]}

(LiveCodeBench and APPS/TACO rows load too: microcoder_jax/data/problems.py). With
`--config.eval.files=heldout.jsonl` the run scores pass@1 on those every `train.eval_every` steps
(into WORKDIR/eval/). No supervised warm start (that is the demo task's). The defaults below are
small enough for a laptop's CPU with a 0.6B model; before the first step the trainer prints its
memory estimate and refuses one over the memory available, naming the knobs that cut it. On a GPU
or TPU raise data.num_prompts, sampling.group_size and sampling.max_new_tokens, and size the run
with `python -m microcoder_jax.plan` first (docs/scaling.md).
"""

from microcoder_jax.config import default_config


def get_config(arg=None):
    c = default_config()
    c.data.task = "problems"
    c.model.path = ""  # --config.model.path=DIR (required)
    c.tokenizer.path = ""  # '' = the model folder's tokenizer
    c.data.train_files = ()  # --config.data.train_files=train.jsonl (required; paths or globs)
    c.eval.files = ()  # optional held-out problems, scored every train.eval_every steps
    c.data.num_prompts = 4  # 4 prompts x G=4 = 16 responses per step
    c.sampling.group_size = 4
    c.sampling.max_new_tokens = 512  # training response cap
    c.data.max_prompt_tokens = 1024  # longer prompts are skipped (the run says so)
    c.data.prompt_buckets = (256, 512, 1024)
    c.model.dtype = "float32"  # CPU: no bfloat16 speed-up
    c.model.remat = "full"
    c.rl.micro_batch_size = 2  # rows per forward/backward: the train step's memory
    c.rl.num_minibatches = 1
    c.rl.learning_rate = 1e-6
    c.temperature.temperature = 1.0
    c.train.steps = 50
    c.train.checkpoint_every = 10
    c.train.eval_every = 25  # only when eval.files is set
    c.train.warm_start_steps = 0  # the supervised warm start is the demo task's
    c.eval.max_new_tokens = 512
    c.eval.batch_problems = 4
    c.evaluator.workers = 0  # one judge process per core
    c.mesh.fsdp = 1  # one device; on a GPU/TPU slice -1 (every chip) is the default
    return c
