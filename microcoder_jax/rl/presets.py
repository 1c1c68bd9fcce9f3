"""Named algorithm presets: GRPO and DAPO baselines and MicroCoder-GRPO, as overrides of RLConfig."""

from __future__ import annotations

import dataclasses

from microcoder_jax.rl.config import RLConfig

PRESETS: dict[str, dict] = {
    # Original GRPO: symmetric clip, sequence-mean of token-means, k3 KL to a frozen reference.
    "grpo": dict(
        eps_low=0.2,
        eps_high=0.2,
        aggregation="seq_mean_token_mean",
        kl_beta=0.001,
        truncation="none",
        dynamic_sampling=False,
    ),
    # DAPO: clip-higher, token-mean, no KL, soft overlong punishment, dynamic sampling.
    "dapo": dict(
        eps_low=0.2,
        eps_high=0.28,
        aggregation="token_mean",
        kl_beta=0.0,
        truncation="soft_overlong",
        dynamic_sampling=True,
    ),
    # MicroCoder-GRPO: DAPO-style clipping and token-mean, no KL, conditional truncation mask.
    "microcoder": dict(
        eps_low=0.2,
        eps_high=0.28,
        aggregation="token_mean",
        kl_beta=0.0,
        truncation="conditional",
        non_incorrect="not_judged_wrong",
        repeat_m=128,
        rho=0.1,
        dynamic_sampling=False,
    ),
}


def make_rl_config(preset: str = "microcoder", *, stale: bool = False, **overrides) -> RLConfig:
    """The preset's RLConfig with `overrides` applied on top (unknown names raise). `stale`: the loop
    trains on batches sampled by older weights (train.off_policy_steps >= 1 or train.partial_rollouts),
    so `is_correction=auto` (the default) means tis, else none."""
    if preset not in PRESETS:
        raise ValueError(f"rl.preset={preset!r}: unknown RL preset; choose from {', '.join(sorted(PRESETS))}")
    fields = {f.name for f in dataclasses.fields(RLConfig)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(
            f"unknown RLConfig fields: {sorted(unknown)} (how the loop schedules rollouts, e.g. "
            "off_policy_steps, partial_rollouts, max_refills, is the train block's: train.KEY)"
        )
    if overrides.get("is_correction", "auto") == "auto":
        overrides["is_correction"] = "tis" if stale else "none"
    return RLConfig(**{**PRESETS[preset], "preset": preset, **overrides})
