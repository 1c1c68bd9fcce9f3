"""The environment contract: the rollout asks an environment for an episode's first messages and
hands it each response; the environment answers with a `Turn` per row, asynchronously (judging
runs on the CPU pool while the accelerator decodes).

An episode is the model's answers to one problem: turn 0 answers the first prompt; while a Turn
is not `done`, its `feedback` is the next user message and the model answers again, up to
`max_turns`. The last Turn's reward is the episode's. In the batch (rl/batch.py) the model's
tokens of every turn are in the response mask and the environment's tokens are holes in it, so the
learner trains on exactly the model's tokens whatever the environment.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Protocol, Sequence


@dataclasses.dataclass(frozen=True)
class Turn:
    """What the environment makes of one response.

    reward: NaN when the judge failed (not the program): the row gets no reward and leaves the
    loss (rl/advantages.py). verdict: one of judge.VERDICTS. program: the code judged (None:
    none found). feedback: the next user message when the episode goes on (`done` False), else None.
    """

    reward: float
    passed: bool
    no_code: bool
    verdict: str
    program: Optional[str] = None
    done: bool = True
    feedback: Optional[str] = None


class PendingTurns(Protocol):
    """Turns being judged: `done()` without blocking, `result()` blocks; both in submission order."""

    def done(self) -> bool: ...

    def result(self) -> list[Turn]: ...


class Environment(Protocol):
    """The seam between the rollout and a task. `messages(problem)`: the chat messages before the
    first answer. `step(pool, problems, responses, turn, truncated)`: start judging these
    responses (decoded text, special tokens dropped; `truncated`: which hit the length cap) to
    their problems on the judge pool, without blocking."""

    @property
    def name(self) -> str: ...

    @property
    def max_turns(self) -> int: ...

    def messages(self, problem) -> list[dict]: ...

    def step(
        self, pool, problems: Sequence, responses: Sequence[str], turn: int = 0, truncated: Sequence[bool] = ()
    ) -> PendingTurns: ...
