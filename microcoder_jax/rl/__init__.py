"""MicroCoder-GRPO (and GRPO / DAPO baselines): advantages, losses and the jitted train step."""

from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.dynamic_sampling import GroupBuffer, add_rollouts
from microcoder_jax.rl.logprobs import compute_logprobs
from microcoder_jax.rl.presets import PRESETS, make_rl_config
from microcoder_jax.rl.registry import register_advantage_scaler, register_aggregation, register_truncation
from microcoder_jax.rl.step import TrainState, init_train_state, make_optimizer, make_train_step

__all__ = [
    "GroupBuffer",
    "PRESETS",
    "RLConfig",
    "TrainState",
    "add_rollouts",
    "compute_logprobs",
    "init_train_state",
    "make_optimizer",
    "make_rl_config",
    "make_train_step",
    "register_advantage_scaler",
    "register_aggregation",
    "register_truncation",
]
