"""The demo with the operation hidden, for multi-turn feedback: `--config=configs/feedback_task.py:ARM`.

    python -m microcoder_jax.train --config=configs/feedback_task.py:feedback --workdir=runs/fb

Every statement reads "print the value of f(a, b)": only the tests say which of the five
operations f is. Each problem has 3 tests, the first public. With one answer (ARM `single`) the
model cannot know f from the prompt; with feedback (`feedback`, env.max_turns=2) a failing first
answer is shown the public example's input and expected output, from which f can be read off
(every test tells the five operations apart), and it answers again. The reward is judged on the
two private tests. Held-out problems (their own tests) are scored before RL and every 10 steps:
first-answer pass@1, and for `feedback` pass@1 after each turn.

ARMs `copy-single` and `copy` are the same two with constant operations (f(a, b) = 3, 4, 6, 7 or
8; data/demo_task.CONSTANTS): a failing example's expected output is the answer itself, so the
feedback is used by copying a number rather than by working out which operation fits. ARM
`copy-reads` is `copy` with a warm start whose second answers copy the expected output half the
time (demo.warm_start_reads=0.5, the rest random; 300 supervised steps): does RL make the model
rely on the feedback? `copy-reads-one-baseline` is the same with one baseline for both turns
(rl.turn_baseline=False). `copy-reads-strong` starts from a stronger partial reader (reads 0.75) and
takes smaller RL steps (learning rate 3.5e-4, half the demo's): at 0.5 two seeds in three started
from a policy that never copied, and every feedback run's truncation spiked near step 5.
"""

from microcoder_jax.config import demo_config

ARMS = ("single", "feedback", "copy-single", "copy", "copy-reads", "copy-reads-one-baseline", "copy-reads-strong")


def get_config(arg: str = "feedback"):
    if arg not in ARMS:
        raise ValueError(f"configs/feedback_task.py:{arg}: expected one of {', '.join(ARMS)}")
    c = demo_config()
    c.demo.hidden_op = True
    c.demo.tests_per_problem = 3
    c.demo.public_tests = 1
    c.demo.held_out_per_op = 4
    c.eval.samples = 1
    c.eval.greedy = False
    c.eval.batch_problems = 20  # the 20 held-out problems in one call
    c.train.eval_every = 10
    c.train.eval_at_start = True  # the starting policy: what RL changed
    c.env.feedback_tokens = 224  # a whole feedback turn of this task in the demo tokenizer: at most 207
    if arg.startswith("copy"):
        from microcoder_jax.data.demo_task import CONSTANTS

        c.demo.ops = tuple(CONSTANTS)
    if arg in ("feedback", "copy") or arg.startswith("copy-reads"):
        c.env.kind, c.env.max_turns = "feedback", 2
    if arg.startswith("copy-reads"):
        # 150 steps at 0.5 taught no copying (3 of 16 failing answers repaired, chance level); 300
        # steps at 1.0 taught it fully (16 of 16): 300 at 0.5 starts RL from a partial reader
        c.demo.warm_start_reads, c.train.warm_start_steps = 0.5, 300
    if arg == "copy-reads-strong":
        c.demo.warm_start_reads, c.rl.learning_rate = 0.75, 3.5e-4
    if arg == "copy-reads-one-baseline":
        c.rl.turn_baseline = False
    return c
