"""Environments: what an episode is. An environment turns a problem into the first prompt's chat
messages and judges each response into a `Turn` (reward, verdict, optional feedback, done).

`code.CodeTask` is the single-turn judged code task of the MicroCoder recipe; `feedback.FeedbackTask`
answers again after public-test feedback (`env.kind=feedback`); base.py is the contract, and
docs/extending.md shows how to add one.
"""

from microcoder_jax.envs.base import Environment, PendingTurns, Turn
from microcoder_jax.envs.code import CodeTask, make_env
from microcoder_jax.envs.feedback import FeedbackTask

__all__ = ["CodeTask", "Environment", "FeedbackTask", "PendingTurns", "Turn", "make_env"]
