"""The truncation task on a CPU, one truncation rule per run: `--config=configs/truncation_task.py:RULE`.

    python -m microcoder_jax.train --config=configs/truncation_task.py:conditional_0.1 --workdir=runs/trunc_c01

The demo's tiny Qwen3 and problems, but every answer first writes a scratchpad of votes
(`<think> sum product product ... </think>`) that settles on the prompt's operation, and then the
program of the last vote (data/truncation_task.py). The warm start spreads the scratchpad over
1-40 votes, so with a 56-token cap about a third of the answers are cut off (no program:
`no_code`, not judged wrong), and a longer scratchpad makes the program right more often (length
pays, up to the cap). Every run is scored on held-out problems before RL and every 10 steps. All
rules share the microcoder preset's loss (clip 0.2/0.28, token-mean, no KL) and differ only in
what happens to truncated answers.

RULE:
  grpo             truncated answers judged like any other (rl.truncation=none; reward 0)
  overlong_filter  every truncated answer leaves the loss (DAPO's / DeepCoder's overlong filter)
  mask_all         every truncated answer gets advantage 0 (kept in the token count)
  conditional_RHO  MicroCoder's conditional mask at rho=RHO, e.g. conditional_0.1, conditional_0.3
  soft_overlong    DAPO's soft overlong punishment over the last quarter of the cap (no dynamic sampling)
"""

from microcoder_jax.config import apply_truncation_rule, demo_config

MAX_NEW_TOKENS = 56  # the response cap: warm-start answers are 31-70 tokens (1-40 votes)


def get_config(arg: str = "conditional_0.1"):
    c = demo_config()
    c.data.enable_thinking = True  # the answer opens its own <think> scratchpad
    c.demo.votes = (1, 40)  # warm-start scratchpad lengths: 31-70 tokens against the 56-token cap
    # The votes settle on the prompt's operation (a chain: the next vote is right with chance 0.98
    # after a right one, 0.03 after a wrong one; the first is right by chance, 0.2) and the program is
    # the last vote's: the longer the scratchpad, the likelier the program is right, up to the cap.
    c.demo.vote_accuracy = 0.2
    c.demo.vote_chain = (0.03, 0.98)
    c.demo.tests_per_problem = 1  # each test tells every operation apart; one keeps the judge cheap
    c.train.warm_start_steps = 200
    c.sampling.max_new_tokens = MAX_NEW_TOKENS
    c.eval.max_new_tokens = MAX_NEW_TOKENS
    c.rl.preset = "microcoder"  # every rule: clip 0.2/0.28, token-mean, no KL
    apply_truncation_rule(c, arg or "conditional_0.1", "configs/truncation_task.py")
    c.rl.repeat_m = 16  # a loop: the last 16 tokens repeat the 16 before (16 identical votes twice)
    c.train.steps = 40
    c.train.checkpoint_every = 0  # only at the end
    # Held-out accuracy: 4 problems per operation with tests of their own (the same for every seed),
    # at the start and every 10 steps: 8 answers each at one fixed temperature (pass@1..8, the
    # answers' lengths) and one greedy answer (pass@1 at T = 0), whatever the arm samples at.
    c.demo.held_out_per_op = 4
    c.train.eval_every = 10
    c.train.eval_at_start = True
    c.eval.samples = 8
    c.eval.temperature = 1.0  # the warm start's own distribution: its lengths span the cap
    c.eval.top_p = 1.0
    c.eval.greedy = True
    c.eval.batch_problems = 20
    return c
