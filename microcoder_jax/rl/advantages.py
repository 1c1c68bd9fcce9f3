"""Advantages and truncation handling: group normalisation, repetition test, masks, overlong shaping.

All functions are jittable and vectorised over the batch; rows are prompt-major
(row = prompt * group_size + g).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from microcoder_jax.rl.config import RLConfig


def group_advantages(rewards: jax.Array, group_size: int, *, std: str = "group",
                     eps: float = 1e-6) -> jax.Array:
    """(r - group mean) / (std + eps) per row.

    `std`: "group" (per-group std, GRPO), "batch" (one std over all rewards, centred per group),
    "none" (no scaling, Dr.GRPO). Standard deviations are unbiased (ddof=1), as in verl and TRL.
    """
    r = rewards.astype(jnp.float32).reshape(-1, group_size)
    centred = r - r.mean(axis=1, keepdims=True)
    if std == "none":
        return centred.reshape(-1)
    if std == "group":
        scale = r.std(axis=1, ddof=1, keepdims=True)
    elif std == "batch":
        scale = r.std(ddof=1)
    else:
        raise ValueError(f"unknown adv_std {std!r}")
    return (centred / (scale + eps)).reshape(-1)


def response_start(response_mask: jax.Array) -> jax.Array:
    """Column of each row's first response token (0 for rows without one). [N, S] -> [N] int32."""
    return jnp.argmax(response_mask > 0, axis=1).astype(jnp.int32)


def repeat_flags(tokens: jax.Array, lengths: jax.Array, m: int,
                 start: jax.Array | None = None) -> jax.Array:
    """repeat(o, m) := o[-m:] == o[-2m:-m] for each row's actual response; False if len < 2m.

    The response of row i is tokens[i, start_i : start_i + lengths_i] (start defaults to 0, i.e.
    `tokens` holds right-padded responses only).
    """
    n, width = tokens.shape
    lengths = lengths.astype(jnp.int32)
    start = jnp.zeros((n,), jnp.int32) if start is None else start.astype(jnp.int32)
    end = start + lengths
    idx = end[:, None] - m + jnp.arange(m, dtype=jnp.int32)[None, :]
    last = jnp.take_along_axis(tokens, jnp.clip(idx, 0, width - 1), axis=1)
    before = jnp.take_along_axis(tokens, jnp.clip(idx - m, 0, width - 1), axis=1)
    return (lengths >= 2 * m) & jnp.all(last == before, axis=1)


def soft_overlong_penalty(lengths: jax.Array, cap: jax.Array | int, cache: int) -> jax.Array:
    """DAPO length penalty: 0 up to cap - cache tokens, then linear down to -1 at the cap."""
    over = lengths.astype(jnp.float32) - (jnp.asarray(cap, jnp.float32) - cache)
    return -jnp.clip(over / cache, 0.0, 1.0)


def non_incorrect(passed: jax.Array, no_code: jax.Array, reading: str) -> jax.Array:
    """The paper's non_incorrect(o): `passed`, or `not_judged_wrong` = passed or no program."""
    if reading == "passed":
        return passed
    if reading == "not_judged_wrong":
        return passed | no_code
    raise ValueError(f"unknown non_incorrect reading {reading!r}")


def conditional_mask(truncated, non_incorrect_, repeating, uniforms, rho) -> jax.Array:
    """MicroCoder's M_i: truncated and non-incorrect and not repeating and U_i < rho."""
    return truncated & non_incorrect_ & ~repeating & (uniforms < rho)


def compute_advantages(config: RLConfig, batch: dict, uniforms: jax.Array):
    """The fused advantage computation of the train step.

    Returns (advantages [N] f32, row_weight [N] f32, stats dict of scalars). `row_weight` is 0
    for rows removed from the loss (overlong filter) and 1 otherwise. Masked rows keep their place
    in the group statistics: the mask multiplies the already normalised advantage.
    """
    rewards = batch["rewards"].astype(jnp.float32)
    truncated = batch["truncated"].astype(bool)
    passed = batch["passed"].astype(bool)
    no_code = batch["no_code"].astype(bool)
    lengths = batch["response_lengths"].astype(jnp.int32)
    start = response_start(batch["response_mask"])
    n, width = batch["tokens"].shape

    if config.truncation == "soft_overlong":
        rewards = rewards + soft_overlong_penalty(lengths, width - start, config.soft_overlong_cache)
    adv = group_advantages(rewards, config.group_size, std=config.adv_std, eps=config.adv_eps)

    repeating = repeat_flags(batch["tokens"], lengths, config.repeat_m, start)
    ok = non_incorrect(passed, no_code, config.non_incorrect)
    zeros = jnp.zeros((n,), bool)
    if config.truncation == "conditional":
        masked = conditional_mask(truncated, ok, repeating, uniforms, config.rho)
    elif config.truncation == "mask_all":
        masked = truncated
    else:
        masked = zeros
    removed = truncated if config.truncation == "overlong_filter" else zeros
    adv = jnp.where(masked, 0.0, adv)
    row_weight = jnp.where(removed, 0.0, 1.0)

    grouped = rewards.reshape(-1, config.group_size)
    frac = lambda x: jnp.mean(x.astype(jnp.float32))
    stats = {
        "reward_mean": rewards.mean(),
        "adv_mean": adv.mean(),
        "adv_std": adv.std(),
        "adv_abs_max": jnp.abs(adv).max(),
        "frac_groups_all_equal": frac(jnp.all(grouped == grouped[:, :1], axis=1)),
        "frac_truncated": frac(truncated),
        "frac_repeating": frac(repeating),
        "frac_masked": frac(masked),
        "frac_removed": frac(removed),
        # Why truncated responses kept their advantage under the conditional rule.
        "frac_trunc_repeating": frac(truncated & repeating),
        "frac_trunc_incorrect": frac(truncated & ~ok),
        "frac_trunc_not_drawn": frac(truncated & ok & ~repeating & (uniforms >= config.rho)),
    }
    return adv, row_weight, stats
