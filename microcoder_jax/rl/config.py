"""`RLConfig`: every knob of the RL algorithm in one typed block, frozen and hashable (static to jit).

How the loop schedules rollouts against the learner (train.off_policy_steps, train.partial_rollouts,
train.max_refills, ...) is the loop's block (trainer/config.py), not this one.

Each field carries its meaning (shown by `--help`) beside its default; the fields the run fills in
from other blocks say which key they copy (`from_run`); the rules across fields are in `check`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from microcoder_jax.blocks import Block, knob

# Imported for their registrations: the built-in truncation rules, scalers, aggregations, IS corrections.
from microcoder_jax.rl import advantages as _advantages  # noqa: F401
from microcoder_jax.rl import corrections as _corrections
from microcoder_jax.rl import losses as _losses  # noqa: F401
from microcoder_jax.rl.registry import lookup

NON_INCORRECT = ("passed", "not_judged_wrong")
DECAY = ("cosine", "constant", "linear")


@dataclasses.dataclass(frozen=True)
class RLConfig(Block):
    """Algorithm settings of one run. Defaults are MicroCoder-GRPO (docs/method.md, the objective).

    Steps (`warmup_steps`, `total_steps`) count rollout batches, i.e. calls of the train step, as
    the paper does ("300 steps"); each call makes `num_minibatches` optimizer updates.

    `non_incorrect` defaults to `not_judged_wrong` (passed, or no program could be extracted
    because of the cut). The paper's rho ablation says more masking grows the length faster; only
    this reading produces that: truncated-but-passing responses (the `passed` reading) carry a
    positive advantage, so masking them would slow length growth, while masking cut-off responses
    with no program removes the length penalty that the method exists to soften.
    """

    PREFIX = "rl"

    preset: str = knob("microcoder", "the algorithm preset: microcoder, dapo or grpo (rl/presets.py)")
    # Advantages: (r - group mean) / (std + eps); std per group, over the batch, or none (Dr.GRPO).
    group_size: int = knob(8, "samples per prompt (G)", from_run="sampling.group_size")
    adv_std: str = knob("group", "advantage std: group, batch or none (Dr.GRPO)")
    adv_eps: float = knob(1e-6, "added to the std")
    adv_std_ddof: int = knob(1, "1: sample std of the G rewards (verl, TRL); 0: population std", choices=(0, 1))
    # Multi-turn episodes: a later turn exists only after a failing answer, so centring its tokens on
    # the whole group (first answers that passed included) pushes every repair attempt down.
    turn_baseline: bool = knob(
        True,
        "multi-turn: centre each turn's tokens on the group's episodes that reached that turn "
        "(the episode's reward; False = one baseline, the whole group's, for every turn)",
    )
    max_turns: int = knob(1, "model turns an episode may have (turn_baseline's static bound)", from_run="env.max_turns")
    # Truncated responses.
    truncation: str = knob("conditional", "conditional, none, mask_all, overlong_filter or soft_overlong")
    non_incorrect: str = knob("not_judged_wrong", "conditional: passed or not_judged_wrong", choices=NON_INCORRECT)
    repeat_m: int = knob(128, "conditional: repetition window m, tokens", at_least=1)
    rho: float = knob(0.1, "conditional: probability of masking a qualifying truncated response")
    soft_overlong_cache: int = knob(1024, "soft_overlong: L_cache tokens of linear penalty", at_least=1)
    # Policy loss.
    eps_low: float = knob(0.2, "clip range below 1")
    eps_high: float = knob(0.28, "clip range above 1 (clip-higher)")
    dual_clip: Optional[float] = knob(None, "dual-clip constant c > 1 for negative advantages (None = off)")
    kl_beta: float = knob(0.0, "k3 KL weight; > 0 keeps a frozen reference model", at_least=0)
    aggregation: str = knob("token_mean", "token_mean, seq_mean_token_mean or constant")
    loss_constant: Optional[float] = knob(
        None, "constant aggregation: the normaliser (None = the generation budget max_new_tokens)"
    )
    # DAPO dynamic sampling (host side, rl/dynamic_sampling.py; its budget is train.max_refills).
    dynamic_sampling: bool = knob(False, "DAPO: drop groups with all-equal rewards and refill")
    # Batch structure: rows per rollout batch split into mini-batches (one update each), each
    # split into micro-batches of `micro_batch_size` rows (gradient accumulation).
    num_minibatches: int = knob(4, "optimizer updates per rollout batch (off-policy degree)", at_least=1)
    micro_batch_size: int = knob(
        8, "rows per forward/backward (gradient accumulation); lower it if memory runs out", at_least=1
    )
    logprob_chunk: int = knob(512, "sequence positions per chunk of the vocab projection", at_least=1)
    # Sequence packing (rl.packing): the old-log-prob pass and the train step run on rows laid end
    # to end in packed rows of `pack_width` tokens (None: the batch's padded width) instead of
    # padded rows; a micro-batch then holds micro_batch_size padded rows' tokens. Same update.
    packing: bool = knob(
        False, "run the old-log-prob pass and the train step on rows laid end to end (same loss and update)"
    )
    pack_width: Optional[int] = knob(None, "packing: tokens per packed row (None = the batch's padded width)")
    # Shared prompts (models.forward_shared_prompt): the G rows of a group begin with the same
    # prompt, so both passes run its columns once per group inside each micro-batch and the rows
    # attend to its keys: the same log-probs and update to float rounding, 1/G of the prompt's work.
    share_prompts: bool = knob(
        False,
        "run each group's prompt columns once a micro-batch in the old-log-prob pass and the train step "
        "(same values to float rounding; not with rl.packing)",
    )
    # Sampler-trainer mismatch correction (rl.corrections): per-token loss weights from
    # r = pi_old / pi_sampler at `is_level` (token, sequence = product, geometric = geometric mean);
    # tis: min(r, is_cap); mis: r outside [is_low, is_high] leaves the loss.
    # auto: tis when batches are sampled by older weights (train.off_policy_steps >= 1 or
    # train.partial_rollouts, which make_rl_config's `stale` says), else none. Measured
    # (docs/experiments.md, staleness): one step stale without it collapses.
    is_correction: str = knob(
        "auto",
        "sampler-trainer mismatch: auto (tis when train.off_policy_steps >= 1 or train.partial_rollouts, "
        "else none), none, "
        "tis (weight min(r, is_cap)) or mis (r outside [is_low, is_high] dropped); r = pi_old / "
        "pi_sampler (rl.corrections)",
    )
    is_cap: float = knob(2.0, "tis: the cap C on r")
    is_level: str = knob(
        "token", "r per token, per sequence (product) or geometric (mean)", choices=_corrections.LEVELS
    )
    is_low: float = knob(0.5, "mis: lowest r kept")
    is_high: float = knob(2.0, "mis: highest r kept")
    # Optimizer: AdamW, warmup then decay, global-norm clipping.
    learning_rate: float = knob(1e-6, "AdamW peak learning rate")
    warmup_steps: int = knob(0, "linear warmup, in rollout steps", at_least=0)
    decay: str = knob("constant", "constant, linear or cosine (to end_lr_ratio at train.steps)", choices=DECAY)
    total_steps: int = knob(300, "rollout steps of the run (the decay's end)", from_run="train.steps")
    end_lr_ratio: float = knob(0.0, "final / peak learning rate of the decay")
    weight_decay: float = knob(0.01, "AdamW weight decay")
    b1: float = knob(0.9, "Adam beta1")
    b2: float = knob(0.999, "Adam beta2")
    adam_eps: float = knob(1e-8, "Adam epsilon")
    grad_clip: float = knob(1.0, "global-norm clip")

    def __post_init__(self):
        if self.is_correction == "auto":  # resolved once: every reader sees the name that runs
            # on-policy unless make_rl_config was told the loop samples with older weights
            object.__setattr__(self, "is_correction", "none")
        super().__post_init__()

    def check(self) -> None:
        """The rules a knob's limits cannot say; a bad value raises `ValueError("rl.KEY=VALUE: ...")`."""
        for name, kind in (
            ("adv_std", "advantage scaler"),
            ("truncation", "truncation rule"),
            ("aggregation", "loss aggregation"),
            ("is_correction", "is correction"),
        ):
            try:
                lookup(kind, getattr(self, name))
            except ValueError as e:
                self._fail(name, str(e).replace(f" {getattr(self, name)!r}", ""))
        if self.loss_constant is not None and not self.loss_constant > 0:
            self._fail("loss_constant", "must be > 0, or None for the generation budget max_new_tokens")
        if self.group_size < 2:
            self._fail("group_size", "must be >= 2: group advantages need several samples")
        if not 0.0 <= self.rho <= 1.0:
            self._fail("rho", "must lie in [0, 1]")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            self._fail("dual_clip", "must be > 1, or None (off)")
        if not self.is_cap >= 1.0:
            self._fail("is_cap", "must be >= 1 (a cap below 1 down-weights every on-policy token)")
        if not 0.0 < self.is_low <= 1.0 <= self.is_high < 1e8:
            self._fail(
                "is_low",
                f"with rl.is_high={self.is_high!r}: need 0 < is_low <= 1 <= is_high < 1e8 "
                "(the band keeps on-policy tokens)",
            )
        if self.share_prompts and self.packing:
            self._fail(
                "share_prompts",
                "packed rows lay several prompts end to end, so no prompt block is shared: "
                "set rl.packing=False to share prompts, or rl.share_prompts=False to pack",
            )
        if self.pack_width is not None and self.pack_width < 2:
            self._fail(
                "pack_width",
                "must be an int >= 2 (tokens per packed row; a multiple of 128 keeps the TPU flash kernel), or None",
            )

    def _fail(self, name: str, what: str):
        """The one error format of config values: `rl.KEY=VALUE: what is wrong; the fix`."""
        self.fail(name, getattr(self, name), what)

    @property
    def uses_reference(self) -> bool:
        """True when the KL term is on: only then does the loop need a reference model."""
        return self.kl_beta > 0
