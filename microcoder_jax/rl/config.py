"""`RLConfig`: every knob of the RL algorithm in one frozen, hashable dataclass (static to jit)."""
from __future__ import annotations

import dataclasses
from typing import Optional

ADV_STD = ("group", "batch", "none")
TRUNCATION = ("conditional", "none", "mask_all", "overlong_filter", "soft_overlong")
NON_INCORRECT = ("passed", "not_judged_wrong")
AGGREGATION = ("token_mean", "seq_mean_token_mean", "constant")
DECAY = ("cosine", "constant", "linear")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Algorithm settings of one run. Defaults are MicroCoder-GRPO (MICROCODER.md section 2).

    Steps (`warmup_steps`, `total_steps`) count rollout batches, i.e. calls of the train step, as
    the paper does ("300 steps"); each call makes `num_minibatches` optimizer updates.

    `non_incorrect` defaults to `not_judged_wrong` (passed, or no program could be extracted
    because of the cut). The paper's rho ablation says more masking grows the length faster; only
    this reading produces that: truncated-but-passing responses (the `passed` reading) carry a
    positive advantage, so masking them would slow length growth, while masking cut-off responses
    with no program removes the length penalty that the method exists to soften.
    """

    preset: str = "microcoder"
    # Advantages: (r - group mean) / (std + eps); std per group, over the batch, or none (Dr.GRPO).
    group_size: int = 8
    prompts_per_batch: int = 64
    adv_std: str = "group"
    adv_eps: float = 1e-6
    # Truncated responses.
    truncation: str = "conditional"
    non_incorrect: str = "not_judged_wrong"
    repeat_m: int = 128
    rho: float = 0.1
    soft_overlong_cache: int = 1024
    # Policy loss.
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: Optional[float] = None
    kl_beta: float = 0.0
    aggregation: str = "token_mean"
    loss_constant: Optional[float] = None  # Dr.GRPO normaliser; None = the batch's token width S
    # DAPO dynamic sampling (host side, see rl.dynamic_sampling).
    dynamic_sampling: bool = False
    max_refills: int = 10
    # Batch structure: rows per rollout batch split into mini-batches (one update each), each
    # split into micro-batches of `micro_batch_size` rows (gradient accumulation).
    num_minibatches: int = 4
    micro_batch_size: int = 8
    logprob_chunk: int = 512  # sequence positions per chunk of the vocab projection
    # Optimizer: AdamW, warmup then decay, global-norm clipping.
    learning_rate: float = 1e-6
    warmup_steps: int = 0
    decay: str = "constant"
    total_steps: int = 300
    end_lr_ratio: float = 0.0
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    adam_eps: float = 1e-8
    grad_clip: float = 1.0

    def __post_init__(self):
        for name, allowed in (("adv_std", ADV_STD), ("truncation", TRUNCATION),
                              ("non_incorrect", NON_INCORRECT), ("aggregation", AGGREGATION),
                              ("decay", DECAY)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"RLConfig.{name}={getattr(self, name)!r}; expected one of {allowed}")
        if self.group_size < 2:
            raise ValueError("group_size must be >= 2: group advantages need several samples")
        if not 0.0 <= self.rho <= 1.0:
            raise ValueError(f"rho={self.rho} must lie in [0, 1]")
        if self.repeat_m < 1 or self.soft_overlong_cache < 1 or self.logprob_chunk < 1:
            raise ValueError("repeat_m, soft_overlong_cache and logprob_chunk must be positive")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip={self.dual_clip} must be > 1 (or None)")
        if self.num_minibatches < 1 or self.micro_batch_size < 1:
            raise ValueError("num_minibatches and micro_batch_size must be positive")
        if self.kl_beta < 0:
            raise ValueError("kl_beta must be >= 0")

    @property
    def uses_reference(self) -> bool:
        """True when the KL term is on: only then does the loop need a reference model."""
        return self.kl_beta > 0
