"""Policy-loss pieces: clipped surrogate, k3 KL and loss aggregation (plain jittable functions).

An aggregation (registered by name in rl.registry) turns one optimizer update's loss mask
[rows, S] into per-token weights whose weighted sum is the loss. The train step computes them
once over the whole mini-batch (all micro-batches, all devices) before splitting it, so gradient
accumulation is exact in every mode.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp

from microcoder_jax.rl.advantages import generation_budget
from microcoder_jax.rl.registry import lookup, register_aggregation

MAX_LOG_RATIO = 20.0  # keeps exp() finite for wildly off-policy tokens


def clipped_surrogate(logp, old_logp, advantages, eps_low: float, eps_high: float, dual_clip: Optional[float] = None):
    """Per-token PPO loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A), optionally dual-clipped.

    `advantages` broadcasts against `logp` (e.g. [N, 1] per row). Returns (loss, ratio,
    clipped_low, clipped_high): the booleans mark tokens whose gradient the clip removed.
    """
    log_ratio = jnp.clip(logp - old_logp, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high) * advantages
    loss = -jnp.minimum(unclipped, clipped)
    if dual_clip is not None:
        # Dual clip (Ye et al. 2020): for A < 0 the loss is also capped at -c * A.
        loss = jnp.where(advantages < 0, jnp.minimum(loss, -dual_clip * advantages), loss)
    clipped_low = (ratio < 1.0 - eps_low) & (advantages < 0)
    clipped_high = (ratio > 1.0 + eps_high) & (advantages > 0)
    return loss, ratio, clipped_low, clipped_high


def k3_kl(logp, ref_logp):
    """Schulman's k3 estimator of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = jnp.clip(ref_logp - logp, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    return jnp.exp(d) - d - 1.0


@register_aggregation("token_mean")
def token_mean(mask, constant: Optional[float] = None):
    """DAPO: every loss token of the update weighs the same (1 / number of loss tokens)."""
    mask = mask.astype(jnp.float32)
    return mask / jnp.maximum(mask.sum(), 1.0)


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(mask, constant: Optional[float] = None):
    """GRPO: mean over rows that have a loss token of each row's token mean."""
    mask = mask.astype(jnp.float32)
    per_row = mask.sum(axis=-1, keepdims=True)
    rows = jnp.maximum((per_row > 0).sum().astype(jnp.float32), 1.0)
    return mask / jnp.maximum(per_row, 1.0) / rows


@register_aggregation("constant")
def constant_normaliser(mask, constant: Optional[float] = None):
    """Dr.GRPO: token sum / (rows x constant); the constant defaults to the generation budget.

    The budget is S - P (max_new_tokens), not the full width S: S includes the prompt bucket,
    which changes from batch to batch and would rescale the loss with the prompt lengths.
    """
    mask = mask.astype(jnp.float32)
    per_row = generation_budget(mask) if constant is None else constant
    return mask / (mask.shape[0] * jnp.asarray(per_row, jnp.float32))


def loss_weights(mask, mode: str, constant: Optional[float] = None):
    """Per-token weights [rows, S] of aggregation `mode` (see rl.registry) over one update's mask."""
    return lookup("loss aggregation", mode)(mask, constant)
