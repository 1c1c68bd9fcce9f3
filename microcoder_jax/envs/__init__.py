"""Environments: what an episode is. An environment turns a problem into the first prompt's chat
messages and judges each response into a `Turn` (reward, verdict, optional feedback, done).

`code.CodeTask` is the single-turn judged code task of the MicroCoder recipe; base.py is the
contract a second environment (multi-turn feedback) implements, and docs/extending.md shows how.
"""

from microcoder_jax.envs.base import Environment, PendingTurns, Turn
from microcoder_jax.envs.code import CodeTask, make_env

__all__ = ["CodeTask", "Environment", "PendingTurns", "Turn", "make_env"]
