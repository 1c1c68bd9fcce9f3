"""The jitted MicroCoder-GRPO train step: one call does every mini-batch update of a rollout batch.

The batch is a `Rollout` (rl/batch.py; a dict of its fields, with an optional "packing", is accepted
too) with its old log-probs (computed once, outside the step, by `rl.logprobs.batch_logprobs`: the
learner's one place for them). Inside one jit: advantages and truncation masks (rl.advantages), then
a lax.scan over mini-batches, each an AdamW update of gradients accumulated over micro-batches with
an inner lax.scan. The aggregation's per-token loss weights of each update are computed over its
whole mini-batch (all micro-batches, all devices) first, so accumulation is exact in every
aggregation mode.

An update whose loss, gradient norm or update is not finite is skipped (params and optimizer
state kept as they were, bit for bit) and counted in the `nonfinite_skipped` metric; the loop
stops after `train.max_nonfinite_steps` consecutive steps with skips.

The state is donated. Everything that changes between calls (rewards, flags, temperatures,
masks, rho's uniforms drawn from `state.rng`) is data, so the step compiles once per batch shape.
With kl_beta = 0 no reference model exists anywhere; with kl_beta > 0 the loop passes
`ref_logprobs` (from `compute_logprobs` on its frozen reference params) in the batch.

Packed (`packing`, an rl.packing.Packing of the batch per mini-batch): advantages and
each mini-batch's loss weights are computed on the padded rows exactly as without it, then every
per-token input is gathered into the packed rows, which the forward and backward run on; the
micro-batches are the packed rows that hold as many tokens as `micro_batch_size` padded rows.
Same loss and update, to float rounding.

Mismatch correction (`cfg.is_correction`, rl.corrections): from the batch's `sampler_logprobs`,
before any aggregation, tokens are dropped from the loss mask (mis) and each token's loss weight
is scaled by a stop-gradient importance weight (`is_weight`), so every aggregation, micro-batch
and packed layout stays exact; with `none` the step is the uncorrected one, op for op.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from microcoder_jax import models, sharding
from microcoder_jax.models import lora
from microcoder_jax.rl import corrections
from microcoder_jax.rl import packing as packing_lib
from microcoder_jax.rl.advantages import compute_advantages
from microcoder_jax.rl.config import RLConfig
from microcoder_jax.rl.batch import Rollout, as_rollout
from microcoder_jax.rl.logprobs import sequence_logprobs, shared_in
from microcoder_jax.rl.losses import clipped_surrogate, k3_kl, loss_weights


class TrainState(NamedTuple):
    """params: fp32 master weights (LoRA: fp32 adapters + the frozen base as stored); opt_state:
    of the trained leaves only; step: rollout batches done; rng: key for rho's uniforms."""

    params: Any
    opt_state: Any
    step: jax.Array
    rng: jax.Array


def learning_rate_schedule(cfg: RLConfig):
    """Linear warmup then constant / linear / cosine decay, in rollout steps (optax counts updates)."""

    def schedule(count):
        step = (count // cfg.num_minibatches).astype(jnp.float32)
        warm = jnp.minimum(1.0, (step + 1.0) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
        progress = jnp.clip((step - cfg.warmup_steps) / max(cfg.total_steps - cfg.warmup_steps, 1), 0.0, 1.0)
        end = cfg.end_lr_ratio
        if cfg.decay == "linear":
            decay = 1.0 - (1.0 - end) * progress
        elif cfg.decay == "cosine":
            decay = end + (1.0 - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * progress))
        else:
            decay = 1.0
        return cfg.learning_rate * warm * decay

    return schedule


def make_optimizer(cfg: RLConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with the warmup/decay schedule."""
    return optax.chain(
        optax.clip_by_global_norm(cfg.grad_clip),
        optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.adam_eps, weight_decay=cfg.weight_decay),
    )


def trainable_part(tree):
    """The trained leaves of a params-shaped tree: the LoRA adapters when it has them (models/lora.py), else all."""
    return lora.split(tree)[0] if lora.has_adapters(tree) else tree


def state_shardings(model_config, cfg: RLConfig, mesh):
    """NamedShardings of the TrainState: params FSDP per sharding.py, Adam moments alike (of the
    adapters only under LoRA)."""
    p_sh = sharding.logical_to_sharding(
        models.param_logical_axes(model_config), mesh, models.param_shapes(model_config)
    )
    abstract_params = jax.eval_shape(lambda: models.init_params(model_config, jax.random.key(0)))
    abstract_opt = jax.eval_shape(make_optimizer(cfg).init, lora.split(abstract_params)[0])
    rep = sharding.replicated(mesh)
    opt_sh = optax.tree_map_params(
        make_optimizer(cfg), lambda _, s: s, abstract_opt, trainable_part(p_sh), transform_non_params=lambda _: rep
    )
    return TrainState(params=p_sh, opt_state=opt_sh, step=rep, rng=rep)  # pyright: ignore[reportArgumentType] (shardings)


def init_train_state(params, rl_config: RLConfig, mesh=None, *, model_config=None, seed: int = 0) -> TrainState:
    """A fresh TrainState; with a mesh (and `model_config`) everything is placed FSDP-sharded."""
    optimizer = make_optimizer(rl_config)
    trainable, frozen = lora.split(params)  # LoRA: adapters trained in float32, the base kept as stored
    trainable = jax.tree.map(lambda p: jnp.array(p, jnp.float32), trainable)  # a copy: the step donates
    frozen = None if frozen is None else jax.tree.map(jnp.copy, frozen)
    params = lora.join(trainable, frozen)
    step, rng = jnp.zeros((), jnp.int32), jax.random.PRNGKey(seed)
    if mesh is None:
        return TrainState(params, optimizer.init(trainable), step, rng)
    if model_config is None:
        raise ValueError("init_train_state(..., mesh=...) needs model_config for the shardings")
    sh = state_shardings(model_config, rl_config, mesh)
    params = jax.device_put(params, sh.params)
    opt_state = jax.jit(optimizer.init, out_shardings=sh.opt_state)(trainable_part(params))
    return TrainState(params, opt_state, jax.device_put(step, sh.step), jax.device_put(rng, sh.rng))


def _micro_loss(params, mb, model_config, cfg: RLConfig, shared=None):
    """Loss contribution of one micro-batch (its share of the mini-batch's weighted sum) + sums.
    `shared = (w, f)`: its first w columns repeat in each group of f rows (run once a group)."""
    logp, entropy = sequence_logprobs(
        params,
        model_config,
        mb["tokens"],
        mb["attention_mask"],
        mb["temperature"],
        cfg.logprob_chunk,
        mb.get("positions"),
        mb.get("segment_ids"),
        shared,
    )
    mask = mb["loss_mask"]
    adv = mb["advantages"] if mb["advantages"].ndim == 2 else mb["advantages"][:, None]
    per_token, ratio, clip_low, clip_high = clipped_surrogate(
        logp, mb["old_logprobs"], adv, cfg.eps_low, cfg.eps_high, cfg.dual_clip
    )
    sums = {}
    if cfg.kl_beta > 0:
        kl_ref = k3_kl(logp, mb["ref_logprobs"])
        per_token = per_token + cfg.kl_beta * kl_ref
        sums["kl_ref"] = jnp.sum(kl_ref * mask)
    weights = mb["loss_weights"] * mb["is_weight"] if "is_weight" in mb else mb["loss_weights"]
    loss = jnp.sum(per_token * weights)
    sg = jax.lax.stop_gradient
    sums.update(
        tokens=mask.sum(),
        clip_low=jnp.sum(clip_low * mask),
        clip_high=jnp.sum(clip_high * mask),
        ratio=jnp.sum(sg(ratio) * mask),
        approx_kl=jnp.sum(sg(k3_kl(logp, mb["old_logprobs"])) * mask),
        entropy=jnp.sum(entropy * mask),
    )
    return loss, (sums, jnp.max(jnp.where(mask > 0, sg(ratio), 0.0)))


def minibatch_grads(
    params, minibatch, model_config, cfg: RLConfig, micro_batch_size: int, param_sh=None, frozen=None, shared=None
):
    """Gradients of one mini-batch's loss, accumulated over micro-batches with lax.scan.

    `params` are the trained leaves; `frozen` (LoRA) the base they are joined with for the
    forward: no gradient is formed for it (no weight-gradient matmuls, no accumulator).
    `shared = (w, G)` (rl.share_prompts): each micro-batch runs its groups' first w columns once.

    `minibatch` holds tokens, attention_mask, loss_mask, advantages, old_logprobs, temperature
    (and ref_logprobs when kl_beta > 0) with `rows` leading; returns (grads, loss, sums, ratio_max).
    Packed rows also hold segment_ids, positions, per-token advantages / temperature and the
    loss_weights (computed on the padded rows before packing).
    """
    rows = minibatch["tokens"].shape[0]
    if rows % micro_batch_size:
        raise ValueError(f"mini-batch of {rows} rows is not divisible by micro_batch_size={micro_batch_size}")
    weights = minibatch.get("loss_weights")
    if weights is None:
        weights = loss_weights(minibatch["loss_mask"], cfg.aggregation, cfg.loss_constant)
    micro = jax.tree.map(
        lambda x: x.reshape(rows // micro_batch_size, micro_batch_size, *x.shape[1:]),
        {**minibatch, "loss_weights": weights},
    )
    in_micro = shared_in(shared, micro_batch_size)
    grad_fn = jax.value_and_grad(
        lambda p, mb, mc, c: _micro_loss(lora.join(p, frozen), mb, mc, c, in_micro), has_aux=True
    )
    zeros = jax.tree.map(jnp.zeros_like, params)

    def body(carry, mb):
        grads, loss, sums, rmax = carry
        mb = jax.tree.map(lambda x: sharding.constrain(x, ("batch",) + (None,) * (x.ndim - 1)), mb)
        (l, (s, m)), g = grad_fn(params, mb, model_config, cfg)
        grads = jax.tree.map(jnp.add, grads, g)
        if param_sh is not None:
            grads = jax.lax.with_sharding_constraint(grads, param_sh)
        sums = jax.tree.map(jnp.add, sums, s)
        return (grads, loss + l, sums, jnp.maximum(rmax, m)), None

    keys = ["tokens", "clip_low", "clip_high", "ratio", "approx_kl", "entropy"]
    keys += ["kl_ref"] if cfg.kl_beta > 0 else []
    init = (zeros, jnp.float32(0), {k: jnp.float32(0) for k in keys}, jnp.float32(0))
    (grads, loss, sums, rmax), _ = jax.lax.scan(body, init, micro)
    return grads, loss, sums, rmax


def _check_shapes(n: int, cfg: RLConfig) -> int:
    if n % cfg.group_size:
        raise ValueError(f"{n} rows are not a whole number of groups of {cfg.group_size}")
    if n % cfg.num_minibatches:
        raise ValueError(f"{n} rows do not split into {cfg.num_minibatches} mini-batches")
    mini = n // cfg.num_minibatches
    micro = packing_lib.micro_batch(cfg, mini)
    if mini % micro:
        raise ValueError(f"mini-batch of {mini} rows is not divisible by micro_batch_size={micro}")
    return micro


def _packed_data(batch: Rollout, pk, loss_mask, advantages, old, cfg: RLConfig):
    """The step's per-token inputs on the packed rows [M * R, W] (see the module doc)."""
    n, s = batch.tokens.shape
    m = cfg.num_minibatches
    weights = jax.vmap(lambda x: loss_weights(x, cfg.aggregation, cfg.loss_constant))(
        loss_mask.reshape(m, n // m, s)
    ).reshape(n, s)
    gather = lambda x: packing_lib.gather(x.astype(jnp.float32), pk)  # noqa: E731
    data = {
        "tokens": packing_lib.gather(batch.tokens, pk),
        "attention_mask": pk.segment_ids > 0,
        "segment_ids": pk.segment_ids,
        "positions": pk.positions,
        "loss_mask": gather(loss_mask),
        "loss_weights": gather(weights),
        "advantages": jnp.where(
            pk.segment_ids > 0,
            gather(advantages) if advantages.ndim == 2 else packing_lib.row_values(advantages, pk, s),
            0.0,
        ),
        "temperature": packing_lib.row_values(batch.temperature.astype(jnp.float32), pk, s),
        "old_logprobs": gather(old),
    }
    if cfg.kl_beta > 0:
        data["ref_logprobs"] = gather(batch.ref_logprobs)
    return data


def all_finite(tree) -> jax.Array:
    """Whether every element of every leaf is finite (a scalar bool)."""
    return jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves(tree)]).all()


def skip_unless(ok: jax.Array, new, old):
    """`new` where `ok`, else `old`, leaf by leaf: a non-finite update leaves params and the
    optimizer state (its step count too) bit-identical."""
    return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)


def train_step(
    state: TrainState, batch: Any, *, model_config, cfg: RLConfig, param_sh=None, packing=None, shared=None
) -> tuple[TrainState, dict]:
    """Un-jitted step body (see module doc); `make_train_step` wraps it in jit with donation.
    `batch`: a Rollout, or a dict of its fields (+ "packing"); `packing` an rl.packing.Packing;
    `shared = (w, G)`: the first w columns repeat in each group (rl.logprobs.shared_prompt_width)."""
    optimizer = make_optimizer(cfg)
    batch, pk = as_rollout(batch)
    pk = packing if packing is not None else pk
    if shared and pk is not None:
        raise ValueError("packed rows have no shared prompt block: rl.packing and rl.share_prompts exclude each other")
    n = batch.tokens.shape[0]
    micro = _check_shapes(n, cfg)
    if batch.old_logprobs is None:
        raise ValueError(
            "the batch has no old_logprobs: compute them once per batch with rl.logprobs.batch_logprobs "
            "at the params that sampled it (the learner does: trainer/learner.py Learner.score)"
        )
    if cfg.kl_beta > 0 and batch.ref_logprobs is None:
        raise ValueError("kl_beta > 0 needs batch['ref_logprobs'] (compute_logprobs on the reference)")
    if cfg.is_correction != "none" and batch.sampler_logprobs is None:
        raise ValueError(
            f"rl.is_correction={cfg.is_correction!r} needs batch['sampler_logprobs'] "
            "(the sampler's per-token log-probs, Rollout.sampler_logprobs)"
        )
    rng, mask_key = jax.random.split(state.rng)
    uniforms = jax.random.uniform(mask_key, (n,))
    advantages, row_weight, adv_stats = compute_advantages(cfg, batch, uniforms)

    m = cfg.num_minibatches
    loss_mask = batch.response_mask.astype(jnp.float32) * row_weight[:, None]
    old = batch.old_logprobs.astype(jnp.float32)
    is_weight, is_metrics = None, {}
    if cfg.is_correction != "none":  # token weights (and dropped tokens) before the aggregation's weights
        loss_mask, is_weight, is_metrics = corrections.apply(cfg, old, batch.sampler_logprobs, loss_mask)
    if pk is not None:  # micro-batches of packed rows holding as many tokens as `micro` rows
        micro = packing_lib.micro_rows(micro, batch.tokens.shape[1], pk.src.shape[1])
        if pk.src.shape[0] % (m * micro):
            raise ValueError(
                f"{pk.src.shape[0]} packed rows are not {m} mini-batches of whole "
                f"micro-batches of {micro}: pack with rl.packing.for_step"
            )
        data = _packed_data(batch, pk, loss_mask, advantages, old, cfg)
    else:
        data = {
            "tokens": batch.tokens,
            "attention_mask": batch.attention_mask,
            "loss_mask": loss_mask,
            "advantages": advantages,
            "old_logprobs": old,
            "temperature": batch.temperature.astype(jnp.float32),
        }
        if cfg.kl_beta > 0:
            data["ref_logprobs"] = batch.ref_logprobs.astype(jnp.float32)
    if is_weight is not None:
        data["is_weight"] = is_weight if pk is None else packing_lib.gather(is_weight, pk)
    rows = data["tokens"].shape[0]
    minis = jax.tree.map(
        lambda x: sharding.constrain(x.reshape(m, rows // m, *x.shape[1:]), (None, "batch") + (None,) * (x.ndim - 1)),
        data,
    )

    trained, frozen = lora.split(state.params)
    grad_sh = None if param_sh is None else trainable_part(param_sh)

    def update(carry, mini):
        params, opt_state = carry
        grads, loss, sums, rmax = minibatch_grads(params, mini, model_config, cfg, micro, grad_sh, frozen, shared)
        grad_norm = optax.tree.norm(grads)
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm) & all_finite(updates)
        params, opt_state = skip_unless(
            finite, (optax.apply_updates(params, updates), new_opt_state), (params, opt_state)
        )
        return (params, opt_state), (loss, grad_norm, sums, rmax, ~finite)

    (params, opt_state), (losses, grad_norms, sums, rmax, skipped) = jax.lax.scan(
        update, (trained, state.opt_state), minis
    )
    params = lora.join(params, frozen)
    sums = jax.tree.map(jnp.sum, sums)
    tokens = jnp.maximum(sums["tokens"], 1.0)
    lr = learning_rate_schedule(cfg)((state.step + 1) * m - 1)
    metrics = {
        "loss": losses.mean(),
        "grad_norm": grad_norms.mean(),
        "grad_norm_max": grad_norms.max(),
        "learning_rate": jnp.asarray(lr, jnp.float32),
        "loss_tokens": sums["tokens"],
        "clip_frac_low": sums["clip_low"] / tokens,
        "clip_frac_high": sums["clip_high"] / tokens,
        "clip_frac": (sums["clip_low"] + sums["clip_high"]) / tokens,
        "ratio_mean": sums["ratio"] / tokens,
        "ratio_max": rmax.max(),
        "approx_kl": sums["approx_kl"] / tokens,
        "entropy": sums["entropy"] / tokens,
        "response_length_mean": batch.response_lengths.astype(jnp.float32).mean(),
        "nonfinite_skipped": skipped.sum(dtype=jnp.int32),
        **adv_stats,
        **is_metrics,
    }
    if cfg.kl_beta > 0:
        metrics["kl_ref"] = sums["kl_ref"] / tokens
    return TrainState(params, opt_state, state.step + 1, rng), metrics


def make_train_step(model_config, rl_config: RLConfig, mesh=None):
    """step(state, batch, packing=None, shared=None) -> (state, metrics): jitted, state donated,
    FSDP-sharded under a mesh; `shared` (static) as in `train_step`."""
    sh = None if mesh is None else state_shardings(model_config, rl_config, mesh)

    def fn(state, batch, packing=None, shared=None):
        return train_step(
            state,
            batch,
            model_config=model_config,
            cfg=rl_config,
            param_sh=None if sh is None else sh.params,
            packing=packing,
            shared=shared,
        )

    if mesh is None:
        return jax.jit(fn, donate_argnums=0, static_argnames=("shared",))
    jitted = jax.jit(fn, donate_argnums=0, static_argnames=("shared",), out_shardings=(sh, sharding.replicated(mesh)))

    def step(state: TrainState, batch: Any, packing=None, shared=None):  # a Rollout, or a dict of its fields
        with jax.set_mesh(mesh):
            return jitted(state, batch, packing, shared=shared)

    step.jitted = jitted  # for compile counting (`step.jitted._cache_size()`)
    return step
