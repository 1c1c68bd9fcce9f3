"""Policy-loss pieces: clipped surrogate, k3 KL and loss aggregation (plain jittable functions).

Aggregation is split in two so gradient accumulation is exact: `token_weights` is local to each
row, `loss_normaliser` is computed once over the whole optimizer step (all micro-batches, all
devices) and every micro-batch divides its weighted token sum by it.
"""
from __future__ import annotations

from typing import Optional

import jax.numpy as jnp

MAX_LOG_RATIO = 20.0  # keeps exp() finite for wildly off-policy tokens


def clipped_surrogate(logp, old_logp, advantages, eps_low: float, eps_high: float,
                      dual_clip: Optional[float] = None):
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


def token_weights(mask, mode: str):
    """Per-token weights of the aggregation: the mask, or mask / row token count (seq-mean)."""
    mask = mask.astype(jnp.float32)
    if mode == "seq_mean_token_mean":
        return mask / jnp.maximum(mask.sum(axis=-1, keepdims=True), 1.0)
    if mode in ("token_mean", "constant"):
        return mask
    raise ValueError(f"unknown aggregation {mode!r}")


def loss_normaliser(mask, mode: str, constant: Optional[float] = None):
    """Denominator over the whole optimizer step's mask [rows, S].

    token_mean: number of loss tokens. seq_mean_token_mean: number of rows with a loss token.
    constant (Dr.GRPO): rows * constant (constant defaults to the token width S).
    """
    mask = mask.astype(jnp.float32)
    if mode == "token_mean":
        count = mask.sum()
    elif mode == "seq_mean_token_mean":
        count = (mask.sum(axis=-1) > 0).sum().astype(jnp.float32)
    elif mode == "constant":
        rows, width = mask.shape[0], mask.shape[-1]
        return jnp.float32(rows * (width if constant is None else constant))
    else:
        raise ValueError(f"unknown aggregation {mode!r}")
    return jnp.maximum(count, 1.0)


def aggregate(per_token, mask, mode: str, constant: Optional[float] = None):
    """Aggregate a per-token loss over one whole batch (no accumulation)."""
    w = token_weights(mask, mode)
    return jnp.sum(per_token * w) / loss_normaliser(mask, mode, constant)
