"""Sampler-trainer mismatch corrections: importance weights pi_old / pi_sampler on the loss.

The sampler draws tokens from its own numerics (quantized KV pages, decode kernels, bf16), not
from the training forward that gives the PPO ratio its behaviour policy pi_old. With the
sampler's per-token log-probs (`Rollout.sampler_logprobs`) the train step can reweight each
token by r = pi_old / pi_sampler, a constant (stop-gradient) factor on the per-token loss:

* ``none``: no correction (the step is exactly the uncorrected one);
* ``tis`` (truncated IS): weight min(r, C), C = `is_cap`; every token stays in the loss;
* ``mis`` (masked IS): tokens whose r lies outside [`is_low`, `is_high`] leave the loss (and the
  aggregation's denominator); the others keep the weight r.

r is taken at `is_level`: ``token`` (each token's own ratio), ``sequence`` (the row's product,
exp of the summed log-ratio, on every token of the row) or ``geometric`` (the row's geometric
mean, exp of the mean log-ratio). The same definitions as verl's rollout IS (`rollout_is_mode`
truncate / mask, `rollout_is_level` token / sequence / geometric, MIS dropping tokens through the
response mask so they leave the denominator), TRL's `vllm_importance_sampling_mode`
(token/sequence _truncate: min(r, cap); sequence = product) and Tunix's `sampler_is="token"`
(min(r, threshold)) and `seq-mask-tis` (geometric-mean band). A new correction is one function
registered with `rl.registry.register_is_correction`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from microcoder_jax.rl.losses import MAX_LOG_RATIO
from microcoder_jax.rl.registry import lookup, register_is_correction

LEVELS = ("token", "sequence", "geometric")


@register_is_correction("none")
def no_correction(ratio, cfg):
    """Every token weighs 1 and stays (the step skips the correction entirely for this name)."""
    return jnp.ones_like(ratio), jnp.ones(ratio.shape, bool)


@register_is_correction("tis")
def truncated_is(ratio, cfg):
    """Truncated IS: weight min(r, C)."""
    return jnp.minimum(ratio, cfg.is_cap), jnp.ones(ratio.shape, bool)


@register_is_correction("mis")
def masked_is(ratio, cfg):
    """Masked IS: r outside [is_low, is_high] is dropped, the rest weighs r."""
    return ratio, (ratio >= cfg.is_low) & (ratio <= cfg.is_high)


def level_ratio(log_ratio, mask, level: str):
    """r [N, S] at `level` from per-token log(pi_old / pi_sampler), over the tokens in `mask`."""
    log_ratio = jnp.where(mask, log_ratio, 0.0)
    if level == "sequence":
        log_ratio = jnp.broadcast_to(log_ratio.sum(-1, keepdims=True), log_ratio.shape)
    elif level == "geometric":
        count = jnp.maximum(mask.sum(-1, keepdims=True), 1).astype(jnp.float32)
        log_ratio = jnp.broadcast_to(log_ratio.sum(-1, keepdims=True) / count, log_ratio.shape)
    elif level != "token":
        raise ValueError(f"is_level={level!r}; expected one of {LEVELS}")
    return jnp.exp(jnp.clip(log_ratio, -MAX_LOG_RATIO, MAX_LOG_RATIO))


def apply(cfg, old_logprobs, sampler_logprobs, loss_mask):
    """(loss_mask without the dropped tokens, per-token weight [N, S], metrics) of cfg.is_correction.

    Metrics over the loss tokens before dropping: is_weight_mean / is_weight_max of the weights of
    the tokens kept, is_truncated_frac (weight below r), is_masked_frac (dropped), is_gap (mean
    |log pi_old - log pi_sampler|, the mismatch itself).
    """
    mask = loss_mask > 0
    log_ratio = old_logprobs.astype(jnp.float32) - sampler_logprobs.astype(jnp.float32)
    ratio = level_ratio(log_ratio, mask, cfg.is_level)
    weight, keep = lookup("is correction", cfg.is_correction)(ratio, cfg)
    kept = mask & keep
    weight = jax.lax.stop_gradient(jnp.where(kept, weight, 0.0))
    tokens = jnp.maximum(mask.sum(), 1).astype(jnp.float32)
    frac = lambda b: jnp.sum(b).astype(jnp.float32) / tokens  # noqa: E731
    metrics = {
        "is_weight_mean": jnp.sum(weight) / jnp.maximum(kept.sum(), 1).astype(jnp.float32),
        "is_weight_max": jnp.max(weight),
        "is_truncated_frac": frac(kept & (weight < ratio)),
        "is_masked_frac": frac(mask & ~keep),
        "is_gap": jnp.sum(jnp.where(mask, jnp.abs(log_ratio), 0.0)) / tokens,
    }
    return loss_mask * kept.astype(loss_mask.dtype), weight, metrics
