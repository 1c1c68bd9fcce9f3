"""The learner: owns the train state, the old (and reference) log-probs, packing and the step.

It trains on the `Rollout`s the rollout worker (worker.py) hands it. Old log-probs are the
training forward at the learner's params when it trains on the batch (`score`, with
rl.logprobs.batch_logprobs: here and nowhere else in the loop), for every train.off_policy_steps k:
the loop calls `score` on a batch's rows as soon as they are sampled, so in a synchronous run
(k = 0; the params that sampled it) they run on the device while the judge works; a batch
sampled k updates ago is ready when asked for, and rl.is_correction weighs the sampler's stale
log-probs against them. Packing is decided here for both passes (rl.packing). With LoRA adapters
both passes read merged weights (the program folds W + A B * alpha/r once per call: one matmul a
projection, a temporary compute-dtype copy of the adapted matrices; models.lora.for_scoring).
"""

from __future__ import annotations

import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import sharding
from microcoder_jax.models import lora
from microcoder_jax.rl import packing
from microcoder_jax.rl.batch import Rollout
from microcoder_jax.rl.logprobs import compute_logprobs, prompt_width, shared_prompt_width


def padded_micro_batch(rl_config, rows: int) -> Optional[int]:
    """The old-log-prob pass's micro-batch on `rows` padded rows: rl.micro_batch_size rows, at most
    all of them (rl.packing.micro_batch); None (every row at once) when it does not divide them."""
    micro = packing.micro_batch(rl_config, rows)
    return micro if rows % micro == 0 else None


def logprob_packing(run, attention_mask) -> tuple[Optional[packing.Packing], Optional[int]]:
    """The old-log-prob pass's (packing, micro-batch): packed rows under rl.packing, else None and
    `padded_micro_batch`."""
    if run.rl_config.packing:
        pack, micro = packing.for_logprobs(attention_mask, run.rl_config, run.mesh)
        return sharding.put_batch(pack, run.mesh), micro
    return None, padded_micro_batch(run.rl_config, np.shape(attention_mask)[0])


def step_packing(run, attention_mask) -> Optional[packing.Packing]:
    """The train step's packed layout (one group per mini-batch) under rl.packing, else None."""
    return packing.for_step(attention_mask, run.rl_config, run.mesh) if run.rl_config.packing else None


def prompt_block(run, rows) -> Optional[tuple[int, int]]:
    """Both passes' static `shared = (w, f)` (rl.logprobs): the first w columns are prompt in every
    row (rl.logprobs.prompt_width), so their log-probs, which no loss reads, skip the LM head; under
    rl.share_prompts w is the widest bucket each group repeats and f = G (those columns run once a
    group), else f = 1. None under rl.packing or where no prompt width is known."""
    cfg = run.rl_config
    if cfg.packing:
        return None
    start = prompt_width(rows["response_mask"], run.data.prompt_buckets)
    if not start:
        return None
    if cfg.share_prompts:
        t, m, temp = rows["tokens"], rows["attention_mask"], rows["temperature"]
        w = shared_prompt_width(t, m, temp, cfg.group_size, run.data.prompt_buckets, start)
        if w:
            return (w, cfg.group_size)
    return (start, 1)


def logprobs(run, params, rows: dict):
    """[N, S] log-probs of these rows (rl.batch.SCORING_FIELDS) at `params` (dispatched, not waited
    for): the one old- and reference-log-prob pass of the loop; 0 in the prompt's columns."""
    tokens, attention_mask, temperature = rows["tokens"], rows["attention_mask"], rows["temperature"]
    on_device = sharding.put_batch({"tokens": tokens, "mask": attention_mask, "t": temperature}, run.mesh)
    pack, micro = logprob_packing(run, attention_mask)
    shared = prompt_block(run, rows)
    return compute_logprobs(
        params,
        run.model_config,
        on_device["tokens"],
        on_device["mask"],
        on_device["t"],
        chunk=run.rl_config.logprob_chunk,
        micro_batch=micro,
        packing=pack,
        shared=shared,
    )


@jax.jit
def _gap(old_logprobs, sampler_logprobs, response_mask):
    width = sampler_logprobs.shape[1]
    mask = response_mask[:, -width:].astype(jnp.float32)
    diff = jnp.abs(old_logprobs[:, -width:] - sampler_logprobs) * mask
    return jnp.sum(diff) / jnp.maximum(jnp.sum(mask), 1.0)


def logprob_gap(run, old_logprobs, sampler_logprobs, response_mask) -> float:
    """Mean |learner - sampler| log-prob over response tokens: the decode numerics' drift, plus
    the policy's drift when the batch was sampled updates ago (train.off_policy_steps)."""
    check = sharding.put_batch({"lp": sampler_logprobs, "mask": response_mask}, run.mesh)
    return float(_gap(old_logprobs, check["lp"], check["mask"]))


class Learner:
    """The train state and its step. `train(batch, scores)` adds the old (and reference) log-probs
    (`score`'s, at the current params), packs the batch, runs the step; returns (batch as trained,
    step metrics on the host, seconds, gap or None)."""

    def __init__(self, run, state, ref_params):
        from microcoder_jax.rl import step as rl_step

        self.run, self.state, self.ref_params = run, state, ref_params
        self.train_step = rl_step.make_train_step(run.model_config, run.rl_config, run.mesh)

    @property
    def params(self):
        return self.state.params

    def score(self, rows: dict) -> dict:
        """The old (and, with rl.kl_beta, reference) log-probs [N, S] of these rows (tokens,
        attention_mask, temperature) at the current params, dispatched and not waited for."""
        run = self.run

        def at(params):
            return logprobs(run, params, rows)

        ref = at(self.reference_params()) if run.rl_config.uses_reference else None
        return {"old_logprobs": at(self.params), "ref_logprobs": ref}

    def reference_params(self):
        """The KL reference (rl.kl_beta > 0): the frozen copy of the initial params, or under LoRA
        the live state's frozen base with zero adapters, which is the policy at step 0 (B = 0)
        without a second copy of the base in memory."""
        if self.ref_params is not None:
            return self.ref_params
        adapters, base = lora.split(self.params)
        return lora.join(jax.tree.map(jnp.zeros_like, adapters), base)

    def complete(self, batch: Rollout, scores: Optional[dict] = None) -> tuple[Rollout, Optional[float]]:
        """The batch with its old (and reference) log-probs (`scores`: from `score` on its rows at
        these params; computed now when None), and the gap to the sampler's (None without them).
        A batch that has old log-probs already (replay of a saved step) is trained as it is."""
        if batch.old_logprobs is not None:
            return batch, None
        scores = self.score(batch.scoring_rows()) if scores is None else scores
        gap = None
        if batch.sampler_logprobs is not None:
            gap = logprob_gap(self.run, scores["old_logprobs"], batch.sampler_logprobs, batch.response_mask)
        return batch.replace(**scores), gap

    def train(self, batch: Rollout, scores: Optional[dict] = None) -> tuple[Rollout, dict, float, Optional[float]]:
        t0 = time.perf_counter()
        batch, gap = self.complete(batch, scores)
        pack = step_packing(self.run, batch.attention_mask)
        shared = prompt_block(self.run, batch.scoring_rows())
        self.state, metrics = self.train_step(
            self.state,
            sharding.put_batch(batch, self.run.mesh),
            sharding.put_batch(pack, self.run.mesh),
            shared=shared,
        )
        return batch, jax.device_get(metrics), time.perf_counter() - t0, gap
