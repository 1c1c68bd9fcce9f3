"""The single-turn judged code task (the MicroCoder recipe): the problem's prompt as data.prompts
writes it, the program extracted from the answer, judged on every test the reward needs, one turn.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from microcoder_jax.data.prompts import chat_messages
from microcoder_jax.envs.base import Turn
from microcoder_jax.judge import extract_code
from microcoder_jax.judge.rewards import Reward, lookup


@dataclasses.dataclass(frozen=True)
class CodeTask:
    """One answer per problem, judged by `reward` (a registered reward: judge/rewards.py, which
    also says whether the judge may stop at the first failed test)."""

    data: object  # data.config.DataConfig: the prompt's instructions, system turn, few-shot file
    reward: Reward
    name: str = "code"
    max_turns: int = 1

    def messages(self, problem) -> list[dict]:
        return chat_messages(problem, self.data)

    def step(
        self, pool, problems: Sequence, responses: Sequence[str], turn: int = 0, truncated: Sequence[bool] = ()
    ) -> "_Judged":
        if turn != 0:
            raise ValueError(f"{self.name} is single-turn: there is no turn {turn}")
        codes = [extract_code(t) for t in responses]
        handle = pool.submit(list(problems), codes, every_test=self.reward.every_test)
        return _Judged(self.reward, list(problems), list(responses), codes, handle)


@dataclasses.dataclass
class _Judged:
    """The pool's handle, read as Turns (the reward applied to each JudgeResult)."""

    reward: Reward
    problems: list
    responses: list
    codes: list
    handle: object

    def done(self) -> bool:
        return self.handle.done()  # type: ignore[attr-defined]

    def result(self) -> list[Turn]:
        results = self.handle.result()  # type: ignore[attr-defined]
        return [
            Turn(
                reward=self.reward(p, text, r),
                passed=bool(r.passed),
                no_code=code is None or r.verdict == "no_code",
                verdict=r.verdict,
                program=code,
            )
            for p, text, code, r in zip(self.problems, self.responses, self.codes, results)
        ]


def make_env(data_config, reward: str, env_config=None):
    """The run's environment (`env_config`: the env.* block; None: the code task) with the named
    reward. One turn is the code task whatever `env.kind`: with no second answer there is no feedback."""
    from microcoder_jax.envs.feedback import FeedbackTask

    if env_config is None or env_config.turns == 1:
        return CodeTask(data_config, lookup(reward))
    return FeedbackTask(data_config, lookup(reward), env_config.max_turns, env_config.feedback_chars)
