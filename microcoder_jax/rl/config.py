"""`RLConfig`: every knob of the RL algorithm in one frozen, hashable dataclass (static to jit)."""
from __future__ import annotations

import dataclasses
from typing import Optional

# Imported for their registrations: the built-in truncation rules, scalers, aggregations, IS corrections.
from microcoder_jax.rl import advantages as _advantages  # noqa: F401
from microcoder_jax.rl import corrections as _corrections
from microcoder_jax.rl import losses as _losses  # noqa: F401
from microcoder_jax.rl.registry import lookup

NON_INCORRECT = ("passed", "not_judged_wrong")
DECAY = ("cosine", "constant", "linear")


MEANINGS = {  # what each field means, as --help shows it (a test checks every field has one)
    "learning_rate": "AdamW peak learning rate", "warmup_steps": "linear warmup, in rollout steps",
    "decay": "constant, linear or cosine (to end_lr_ratio at train.steps)",
    "end_lr_ratio": "final / peak learning rate of the decay", "weight_decay": "AdamW weight decay",
    "b1": "Adam beta1", "b2": "Adam beta2", "adam_eps": "Adam epsilon", "grad_clip": "global-norm clip",
    "num_minibatches": "optimizer updates per rollout batch (off-policy degree)",
    "micro_batch_size": "rows per forward/backward (gradient accumulation); lower it if memory runs out",
    "logprob_chunk": "sequence positions per chunk of the vocab projection",
    "adv_std": "advantage std: group, batch or none (Dr.GRPO)", "adv_eps": "added to the std",
    "adv_std_ddof": "1: sample std of the G rewards (verl, TRL); 0: population std",
    "truncation": "conditional, none, mask_all, overlong_filter or soft_overlong",
    "non_incorrect": "conditional: passed or not_judged_wrong",
    "repeat_m": "conditional: repetition window m, tokens",
    "rho": "conditional: probability of masking a qualifying truncated response",
    "soft_overlong_cache": "soft_overlong: L_cache tokens of linear penalty",
    "eps_low": "clip range below 1", "eps_high": "clip range above 1 (clip-higher)",
    "dual_clip": "dual-clip constant c > 1 for negative advantages (None = off)",
    "kl_beta": "k3 KL weight; > 0 keeps a frozen reference model",
    "aggregation": "token_mean, seq_mean_token_mean or constant",
    "loss_constant": "constant aggregation: the normaliser (None = the generation budget max_new_tokens)",
    "dynamic_sampling": "DAPO: drop groups with all-equal rewards and refill",
    "max_refills": "DAPO: extra generation batches per step before topping up",
    "is_correction": "sampler-trainer mismatch: none, tis (weight min(r, is_cap)) or mis (r outside "
                     "[is_low, is_high] dropped); r = pi_old / pi_sampler (rl.corrections)",
    "is_cap": "tis: the cap C on r", "is_level": "r per token, per sequence (product) or geometric (mean)",
    "is_low": "mis: lowest r kept", "is_high": "mis: highest r kept",
    "packing": "run the old-log-prob pass and the train step on rows laid end to end (same loss and update)",
    "pack_width": "packing: tokens per packed row (None = the batch's padded width)",
    "off_policy_steps": "k: batches sampled ahead in a background thread with weights at most k updates old "
                        "(0 = synchronous; k >= 1 wants is_correction=tis; multi-host: made in the learner's "
                        "thread, no overlap)",
}


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Algorithm settings of one run. Defaults are MicroCoder-GRPO (docs/method.md, the objective).

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
    adv_std: str = "group"  # an advantage scaler of rl.registry
    adv_eps: float = 1e-6
    adv_std_ddof: int = 1  # 1: sample std of the G rewards (verl, TRL); 0: population std
    # Truncated responses.
    truncation: str = "conditional"  # a truncation rule of rl.registry
    non_incorrect: str = "not_judged_wrong"
    repeat_m: int = 128
    rho: float = 0.1
    soft_overlong_cache: int = 1024
    # Policy loss.
    eps_low: float = 0.2
    eps_high: float = 0.28
    dual_clip: Optional[float] = None
    kl_beta: float = 0.0
    aggregation: str = "token_mean"  # a loss aggregation of rl.registry
    loss_constant: Optional[float] = None  # "constant" mode: rows x this; None = max_new_tokens
    # DAPO dynamic sampling (host side, see rl.dynamic_sampling).
    dynamic_sampling: bool = False
    max_refills: int = 10
    # Batch structure: rows per rollout batch split into mini-batches (one update each), each
    # split into micro-batches of `micro_batch_size` rows (gradient accumulation).
    num_minibatches: int = 4
    micro_batch_size: int = 8
    logprob_chunk: int = 512  # sequence positions per chunk of the vocab projection
    # Sequence packing (rl.packing): the old-log-prob pass and the train step run on rows laid end
    # to end in packed rows of `pack_width` tokens (None: the batch's padded width) instead of
    # padded rows; a micro-batch then holds micro_batch_size padded rows' tokens. Same update.
    packing: bool = False
    pack_width: Optional[int] = None
    # Sampler-trainer mismatch correction (rl.corrections): per-token loss weights from
    # r = pi_old / pi_sampler at `is_level` (token, sequence = product, geometric = geometric mean);
    # tis: min(r, is_cap); mis: r outside [is_low, is_high] leaves the loss.
    is_correction: str = "none"  # an is correction of rl.registry
    is_cap: float = 2.0
    is_level: str = "token"
    is_low: float = 0.5
    is_high: float = 2.0
    # Rollouts ahead of the learner (trainer/pipeline.py): 0 samples each batch with the params
    # that train on it; k >= 1 samples while the learner trains, with weights up to k updates old
    # (the old log-probs are the learner's then, so is_correction=tis weighs the stale sampler).
    off_policy_steps: int = 0
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
        """Each value checked; a bad one raises `ValueError("rl.KEY=VALUE: what is wrong; the fix")`."""
        for name, kind in (("adv_std", "advantage scaler"), ("truncation", "truncation rule"),
                           ("aggregation", "loss aggregation"), ("is_correction", "is correction")):
            try:
                lookup(kind, getattr(self, name))
            except ValueError as e:
                self._fail(name, str(e).replace(f" {getattr(self, name)!r}", ""))
        for name, allowed in (("non_incorrect", NON_INCORRECT), ("decay", DECAY),
                              ("is_level", _corrections.LEVELS)):
            if getattr(self, name) not in allowed:
                self._fail(name, f"must be one of {', '.join(allowed)}")
        if self.adv_std_ddof not in (0, 1):
            self._fail("adv_std_ddof", "must be 0 (population std) or 1 (sample std)")
        if self.loss_constant is not None and not self.loss_constant > 0:
            self._fail("loss_constant", "must be > 0, or None for the generation budget max_new_tokens")
        if self.group_size < 2:
            self._fail("group_size", "must be >= 2: group advantages need several samples")
        if not 0.0 <= self.rho <= 1.0:
            self._fail("rho", "must lie in [0, 1]")
        for name in ("repeat_m", "soft_overlong_cache", "logprob_chunk", "num_minibatches", "micro_batch_size"):
            if getattr(self, name) < 1:
                self._fail(name, "must be >= 1")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            self._fail("dual_clip", "must be > 1, or None (off)")
        if self.kl_beta < 0:
            self._fail("kl_beta", "must be >= 0 (0 = no KL term)")
        if not self.is_cap >= 1.0:
            self._fail("is_cap", "must be >= 1 (a cap below 1 down-weights every on-policy token)")
        if not 0.0 < self.is_low <= 1.0 <= self.is_high < 1e8:
            self._fail("is_low", f"with rl.is_high={self.is_high!r}: need 0 < is_low <= 1 <= is_high < 1e8 "
                       "(the band keeps on-policy tokens)")
        if isinstance(self.off_policy_steps, bool) or not isinstance(self.off_policy_steps, int) or \
                self.off_policy_steps < 0:
            self._fail("off_policy_steps", "must be an int >= 0 (0 = synchronous; 1 = sample the next batch "
                       "while the learner trains)")
        if not isinstance(self.packing, bool):
            self._fail("packing", "must be True or False")
        if self.pack_width is not None and (isinstance(self.pack_width, bool) or not isinstance(
                self.pack_width, int) or self.pack_width < 2):
            self._fail("pack_width", "must be an int >= 2 (tokens per packed row; a multiple of 128 keeps "
                       "the TPU flash kernel), or None")

    def _fail(self, name: str, what: str):
        """The one error format of config values: `rl.KEY=VALUE: what is wrong; the fix`."""
        raise ValueError(f"rl.{name}={getattr(self, name)!r}: {what}")

    @property
    def uses_reference(self) -> bool:
        """True when the KL term is on: only then does the loop need a reference model."""
        return self.kl_beta > 0
