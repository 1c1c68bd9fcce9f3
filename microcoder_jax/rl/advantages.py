"""Advantages and truncation handling: group normalisation, repetition test, masks, overlong shaping.

All functions are jittable and vectorised over the batch; rows are prompt-major
(row = prompt * group_size + g). The advantage scalers ("group", "batch", "none") and the
truncation rules ("conditional", "none", "mask_all", "overlong_filter", "soft_overlong") are
registered by name in rl.registry.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from microcoder_jax.rl.registry import lookup, register_advantage_scaler, register_truncation

RLConfig = Any  # rl.config.RLConfig, which imports this module to register the built-ins


@register_advantage_scaler("group")
def scale_by_group_std(centred, rewards, *, ddof: int, eps: float, valid=None):
    """GRPO: divide by each group's reward std (over its `valid` rows)."""
    return centred / (_std(centred, valid, ddof, axis=1) + eps)


@register_advantage_scaler("batch")
def scale_by_batch_std(centred, rewards, *, ddof: int, eps: float, valid=None):
    """Divide by one std over all (valid) rewards of the batch (still centred per group)."""
    v = jnp.ones_like(rewards, bool) if valid is None else valid
    count = jnp.sum(v)
    mean = jnp.sum(jnp.where(v, rewards, 0.0)) / jnp.maximum(count, 1)
    return centred / (_std(jnp.where(v, rewards - mean, 0.0), None, ddof, count=count) + eps)


@register_advantage_scaler("none")
def no_scaling(centred, rewards, *, ddof: int, eps: float, valid=None):
    """Dr.GRPO: centred rewards, no division."""
    return centred


def _std(centred, valid, ddof: int, axis=None, count=None):
    """The std of values already centred (0 where not `valid`) over `axis`, with `ddof`."""
    if count is None:
        count = jnp.sum(jnp.ones_like(centred, bool) if valid is None else valid, axis=axis, keepdims=True)
    return jnp.sqrt(jnp.sum(centred * centred, axis=axis, keepdims=axis is not None) / jnp.maximum(count - ddof, 1))


def group_advantages(
    rewards: jax.Array,
    group_size: int,
    *,
    std: str = "group",
    eps: float = 1e-6,
    ddof: int = 1,
    valid: jax.Array | None = None,
) -> jax.Array:
    """(r - group mean) scaled by the advantage scaler `std` (see the registry), per row.

    `ddof=1` is the sample (unbiased) std, as in verl and TRL; `ddof=0` the population std.
    `valid` [N] bool: the rows that have a reward; the others (judge errors) are left out of
    their group's mean and std and get advantage 0.
    """
    r = rewards.astype(jnp.float32).reshape(-1, group_size)
    v = jnp.ones_like(r, bool) if valid is None else valid.reshape(-1, group_size)
    count = jnp.sum(v, axis=1, keepdims=True)
    mean = jnp.sum(jnp.where(v, r, 0.0), axis=1, keepdims=True) / jnp.maximum(count, 1)
    centred = jnp.where(v, r - mean, 0.0)
    return lookup("advantage scaler", std)(centred, r, ddof=ddof, eps=eps, valid=v).reshape(-1)


def token_turns(response_mask: jax.Array) -> jax.Array:
    """Each column's model turn, 1-based, 0 off the model's tokens: a turn starts where the response
    mask rises (an environment's turn is a hole in it). [N, S] -> [N, S] int32."""
    m = response_mask > 0
    rise = m & ~jnp.pad(m, ((0, 0), (1, 0)))[:, :-1]
    return jnp.where(m, jnp.cumsum(rise, axis=1), 0).astype(jnp.int32)


def turn_advantages(rewards, first, response_mask, config: RLConfig, valid):
    """Per-token advantages [N, S] with a baseline per turn: a token of turn k is centred (and
    scaled) on the rows of its group that reached turn k, `first` [N] (the whole group's) for turn 1.
    A later turn is there only after a failing answer: against the whole group, passing first
    answers included, every repair attempt would look worse than average."""
    turns = token_turns(response_mask)
    reached = jnp.max(turns, axis=1)
    per_turn = [first] + [
        group_advantages(
            rewards,
            config.group_size,
            std=config.adv_std,
            eps=config.adv_eps,
            ddof=config.adv_std_ddof,
            valid=valid & (reached >= k),
        )
        for k in range(2, config.max_turns + 1)
    ]
    table = jnp.stack(per_turn, axis=1)  # [N, K]
    return jnp.take_along_axis(table, jnp.clip(turns - 1, 0, config.max_turns - 1), axis=1)


def response_start(response_mask: jax.Array) -> jax.Array:
    """Column of each row's first response token (0 for rows without one). [N, S] -> [N] int32."""
    return jnp.argmax(response_mask > 0, axis=1).astype(jnp.int32)


def generation_budget(response_mask: jax.Array) -> jax.Array:
    """Response columns of the batch, S - P (max_new_tokens): S minus the first response column.

    Per the batch layout every response starts at column P (the prompt bucket); rows without a
    response are skipped. A batch with no response token at all gives S.
    """
    width = response_mask.shape[-1]
    has = jnp.any(response_mask > 0, axis=-1)
    first = jnp.min(jnp.where(has, response_start(response_mask), width))
    return jnp.where(jnp.any(has), width - first, width).astype(jnp.int32)


def repeat_flags(tokens: jax.Array, lengths: jax.Array, m: int, start: jax.Array | None = None) -> jax.Array:
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


class TruncationInputs(NamedTuple):
    """Per-row facts a truncation rule reads ([N] arrays; `budget` is the scalar S - P)."""

    rewards: jax.Array
    truncated: jax.Array
    non_incorrect: jax.Array
    repeating: jax.Array
    uniforms: jax.Array
    lengths: jax.Array
    budget: jax.Array


@register_truncation("conditional")
def conditional_truncation(cfg: RLConfig, rows: TruncationInputs):
    """MicroCoder-GRPO: zero the advantage of rows drawn by the conditional mask M_i."""
    masked = conditional_mask(rows.truncated, rows.non_incorrect, rows.repeating, rows.uniforms, cfg.rho)
    return rows.rewards, masked, jnp.zeros_like(masked)


@register_truncation("none")
def keep_truncated(cfg: RLConfig, rows: TruncationInputs):
    """Truncated rows train like any other."""
    zeros = jnp.zeros_like(rows.truncated)
    return rows.rewards, zeros, zeros


@register_truncation("mask_all")
def mask_all_truncated(cfg: RLConfig, rows: TruncationInputs):
    """Every truncated row gets advantage 0 (kept in the token count)."""
    return rows.rewards, rows.truncated, jnp.zeros_like(rows.truncated)


@register_truncation("overlong_filter")
def filter_truncated(cfg: RLConfig, rows: TruncationInputs):
    """DAPO's overlong filter: truncated rows leave the loss (and its token count)."""
    return rows.rewards, jnp.zeros_like(rows.truncated), rows.truncated


@register_truncation("soft_overlong")
def soft_overlong_shaping(cfg: RLConfig, rows: TruncationInputs):
    """DAPO's soft overlong punishment added to the rewards before normalisation."""
    zeros = jnp.zeros_like(rows.truncated)
    penalty = soft_overlong_penalty(rows.lengths, rows.budget, cfg.soft_overlong_cache)
    return rows.rewards + penalty, zeros, zeros


def compute_advantages(config: RLConfig, batch: dict, uniforms: jax.Array):
    """The fused advantage computation of the train step.

    Returns (advantages [N] f32, or [N, S] per token under rl.turn_baseline with several turns,
    row_weight [N] f32, stats dict of scalars). `row_weight` is 0
    for rows removed from the loss (overlong filter; a judge_error row, whose reward is NaN) and 1
    otherwise. Masked rows keep their place in the group statistics: the mask multiplies the
    already normalised advantage. Judge-error rows are left out of them (`group_advantages`).
    """
    raw = batch["rewards"].astype(jnp.float32)
    judged = jnp.isfinite(raw)  # NaN: a judge_error row (judge.reward), no reward at all
    truncated = batch["truncated"].astype(bool)
    lengths = batch["response_lengths"].astype(jnp.int32)
    start = response_start(batch["response_mask"])
    repeating = repeat_flags(batch["tokens"], lengths, config.repeat_m, start)
    ok = non_incorrect(batch["passed"].astype(bool), batch["no_code"].astype(bool), config.non_incorrect)
    rows = TruncationInputs(
        jnp.where(judged, raw, 0.0),
        truncated,
        ok,
        repeating,
        uniforms,
        lengths,
        generation_budget(batch["response_mask"]),
    )
    rewards, masked, removed = lookup("truncation rule", config.truncation)(config, rows)
    adv = group_advantages(
        rewards, config.group_size, std=config.adv_std, eps=config.adv_eps, ddof=config.adv_std_ddof, valid=judged
    )
    stats_adv = adv = jnp.where(masked | ~judged, 0.0, adv)
    if config.turn_baseline and config.max_turns > 1:
        per_token = turn_advantages(rewards, adv, batch["response_mask"], config, judged)
        adv = jnp.where((masked | ~judged)[:, None], 0.0, per_token)
    # a judge_error row leaves the loss and its token count, as the overlong filter's rows do
    row_weight = jnp.where(removed | ~judged, 0.0, 1.0)

    grouped, seen = rewards.reshape(-1, config.group_size), judged.reshape(-1, config.group_size)
    spread = jnp.max(jnp.where(seen, grouped, -jnp.inf), axis=1) > jnp.min(
        jnp.where(seen, grouped, jnp.inf), axis=1
    )  # over the judged rows
    frac = lambda x: jnp.mean(x.astype(jnp.float32))  # noqa: E731
    stats = {
        "reward_mean": jnp.sum(jnp.where(judged, rewards, 0.0)) / jnp.maximum(jnp.sum(judged), 1),
        "judge_error_frac": frac(~judged),
        "adv_mean": stats_adv.mean(),  # the rows' (first turns') advantages
        "adv_std": stats_adv.std(),
        "adv_abs_max": jnp.abs(stats_adv).max(),
        "frac_groups_all_equal": frac(~spread),
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
