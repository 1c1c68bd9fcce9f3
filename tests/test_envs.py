"""The environment seam (envs/): the single-turn code task behind it gives today's prompts and
verdicts, a new environment plugs into the rollout's judge without other changes, and a batch
whose response mask has holes (an environment's tokens between the model's turns) trains on
exactly the model's tokens. The toy environment here is the one to copy (docs/extending.md)."""

import dataclasses
import math
import types

import jax
import numpy as np
import pytest

from microcoder_jax import config as config_lib
from microcoder_jax import models
from microcoder_jax.data import prompts as prompts_lib
from microcoder_jax.data.problems import Problem, TestCase
from microcoder_jax.envs import Turn, make_env
from microcoder_jax.judge import JudgePool
from microcoder_jax.rl.presets import make_rl_config
from microcoder_jax.rl.step import init_train_state, make_train_step
from microcoder_jax.trainer.setup import block_fields
from microcoder_jax.trainer.rollout import GroupJudge, verdict_arrays
from random_params import numpy_params

SUM = Problem("sum", [TestCase("3 4\n", "7\n"), TestCase("10 20\n", "30\n"), TestCase("1 1\n", "2\n")])
RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG_LAST = "```python\na, b = map(int, input().split())\nprint(a + b if a > 1 else 0)\n```"


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=2, timeout=2.0, memory_mb=256) as p:
        yield p


def data_block(**changes):
    c = config_lib.default_config()
    for k, v in changes.items():
        c.data[k] = v
    return block_fields(c)["data"]


class ChatTokenizer:
    """Renders chat messages as plain text (the template a test can read)."""

    def apply_chat_template(self, messages, tokenize, add_generation_prompt, enable_thinking):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def encode(self, text, add_special_tokens=False):
        return [ord(ch) % 251 for ch in text]


def test_code_task_prompt_is_the_data_prompt(tmp_path):
    shots = tmp_path / "shots.jsonl"
    shots.write_text('{"question_id": "s", "tests": [{"input": "", "output": "1\\n"}], "solutions": ["print(1)"]}\n')
    for data in (data_block(), data_block(system_prompt="Be brief.", few_shot_file=str(shots))):
        env = make_env(data, "all")
        tok = ChatTokenizer()
        expected = prompts_lib.render_prompt(
            tok,
            SUM,
            system_prompt=data.system_prompt,
            few_shot=prompts_lib.few_shot_turns(str(shots), data.instruction_stdin, data.instruction_call)
            if data.few_shot_file
            else (),
        )
        assert prompts_lib.render_messages(tok, env.messages(SUM)) == expected
        assert prompts_lib.encode_prompt(tok, SUM, data) == tok.encode(expected)


def test_code_task_turns_follow_the_registered_reward(pool):
    for reward, every_test in (("all", False), ("fraction", True)):
        env = make_env(data_block(), reward)
        assert env.max_turns == 1 and env.reward.every_test is every_test
        turns = env.step(pool, [SUM] * 3, [RIGHT, WRONG_LAST, "no fence here"]).result()
        assert [t.verdict for t in turns] == ["passed", "wrong_answer", "no_code"]
        assert [t.passed for t in turns] == [True, False, False] and [t.no_code for t in turns] == [False, False, True]
        assert all(t.done and t.feedback is None for t in turns)
        assert turns[0].program.startswith("a, b =") and turns[2].program is None
        assert turns[1].reward == (2 / 3 if every_test else 0.0) and turns[0].reward == 1.0
    with pytest.raises(ValueError, match="single-turn"):
        env.step(pool, [SUM], [RIGHT], turn=1)


@dataclasses.dataclass(frozen=True)
class LengthEnv:
    """A toy environment: the reward is 1 when the answer is at most `limit` characters; it never
    runs code, so it needs no pool. Copy this shape for a new environment."""

    limit: int
    name: str = "length"
    max_turns: int = 1

    def messages(self, problem):
        return [{"role": "user", "content": f"Answer {problem.question_id} in {self.limit} characters."}]

    def step(self, pool, problems, responses, turn=0):
        turns = [Turn(float(len(r) <= self.limit), len(r) <= self.limit, False, "passed") for r in responses]
        return types.SimpleNamespace(done=lambda: True, result=lambda: turns)


def test_a_new_environment_plugs_into_the_rollout_judge():
    run = types.SimpleNamespace(
        tokenizer=types.SimpleNamespace(batch_decode=lambda rows, **_: ["x" * len(r) for r in rows])
    )
    judge = GroupJudge(run, None, [SUM, SUM], 2, rows=slice(0, 4), env=LengthEnv(limit=3))
    sample = types.SimpleNamespace(tokens=np.ones((4, 6), np.int32), lengths=np.array([2, 5, 3, 6], np.int32))
    judge.add(0, sample)
    rewards, passed, no_code, counts = verdict_arrays(judge.results())
    assert rewards.tolist() == [1.0, 0.0, 1.0, 0.0] and counts == {"passed": 4} and not no_code.any()
    assert judge.known()[0].all() and judge.texts() == ["xx", "xxxxx", "xxx", "xxxxxx"]


def test_a_judge_error_turn_has_no_reward(pool):
    (turn,) = make_env(data_block(), "fraction").step(pool, [Problem("empty", [])], [RIGHT]).result()
    assert turn.verdict == "judge_error" and math.isnan(turn.reward) and not turn.passed
    assert math.isnan(verdict_arrays([turn])[0][0])


# A batch laid out as a two-turn episode: [prompt | model turn 1 | environment feedback | model turn 2].
MC = models.get_preset("tiny", dtype="float32")
G, N, P, T1, FB, T2 = 4, 8, 4, 4, 3, 4
S = P + T1 + FB + T2
HOLE = slice(P + T1, P + T1 + FB)  # the environment's tokens: attended, not trained


def episode_batch(seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, MC.vocab_size, (N, S)).astype(np.int32)
    attention = np.ones((N, S), np.int32)
    response = np.zeros((N, S), np.int32)
    response[:, P:] = 1
    response[:, HOLE] = 0
    return {
        "tokens": tokens,
        "attention_mask": attention,
        "response_mask": response,
        "response_lengths": np.full(N, S - P, np.int32),  # first model token to the last
        "truncated": np.zeros(N, bool),
        "temperature": np.ones(N, np.float32),
        "rewards": np.tile([1.0, 0.0, 1.0, 0.0], N // G).astype(np.float32),
        "passed": np.tile([True, False, True, False], N // G),
        "no_code": np.zeros(N, bool),
        "old_logprobs": rng.normal(-3.0, 0.3, (N, S)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def one_step():
    cfg = make_rl_config("microcoder", group_size=G, num_minibatches=1, micro_batch_size=N, logprob_chunk=S)
    step = make_train_step(MC, cfg)
    base = numpy_params(MC, 0.02)

    def run(batch):
        state, metrics = step(init_train_state(jax.tree.map(np.copy, base), cfg), batch)
        return jax.tree.map(np.asarray, state.params), metrics

    return run


def test_a_response_mask_with_holes_trains_on_the_model_tokens_only(one_step):
    batch = episode_batch()
    params, metrics = one_step(batch)
    # the environment's columns carry no loss: anything in their old log-probs changes nothing
    noisy = dict(batch, old_logprobs=batch["old_logprobs"].copy())
    noisy["old_logprobs"][:, HOLE] += 5.0
    same, _ = one_step(noisy)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(same)))
    # a model column does carry loss
    moved = dict(batch, old_logprobs=batch["old_logprobs"].copy())
    moved["old_logprobs"][:, P + T1 + FB] += 5.0
    other, _ = one_step(moved)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(other)))
    # and the environment's tokens are context for the model's next turn
    context = dict(batch, tokens=batch["tokens"].copy())
    context["tokens"][:, HOLE.start] = (context["tokens"][:, HOLE.start] % (MC.vocab_size - 1)) + 1
    ctx, _ = one_step(context)
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(ctx)))
    assert np.isfinite(float(metrics["loss"]))
