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

from microcoder_jax.config import problems_config


def get_config(arg=None):
    """`config.problems_config()`: data.task=problems, model.path='' and data.train_files=() to set,
    tokenizer.path='' (the model folder's), 4 prompts x 4 samples of up to 512 tokens per step,
    micro-batch 2, 50 steps, a checkpoint every 10, eval every 25 (with eval.files), no warm start."""
    return problems_config()
