"""Batched sampling from Qwen3 on a KV cache, with per-row temperature, top-p and top-k.

`prefill` runs each prompt once into a cache its G samples share (`SharedPrefix`); `decode` is
one `lax.while_loop` over per-layer caches that grow in phases, so a step reads about the filled
slots. Only shapes are static (model config, prompts, G, prompt bucket, `max_new_tokens`);
temperature, top-p, top-k, stop and pad ids are per-row data, so changing them never recompiles.
A token is drawn by inverse CDF (one uniform per row) after top-k then top-p masking (ties
with the last kept token kept), whose thresholds come from a radix select over the vocabulary
rather than a sort; the returned log-prob and entropy are those of the untruncated
softmax(logits / T), the quantity the trainer recomputes (greedy rows, T = 0, report them at
T = 1). Step i draws with fold_in(rng, i), so the
draws do not depend on how rows are sharded. `generate` reshards the params once per call into
the decode layout (`DECODE_AXIS_RULES`: weights whole over `data` and `fsdp`), so the loop gathers
no weight, and frees that copy before it returns. Rows that finish early keep computing until the
last one does (the paged engine refills them instead).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from typing import Optional, Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import sharding as shd
from microcoder_jax.data.tokenizer import ENDOFTEXT, IM_END
from microcoder_jax.data.prompts import left_pad, prompt_bucket  # noqa: F401 (prompt_bucket re-exported)
from microcoder_jax.models import (
    KVCache,
    DecoderConfig,
    SharedPrefix,
    forward,
    init_cache,
    init_params,
    lm_head,
    param_logical_axes,
    param_shapes,
)
from microcoder_jax.models.decoding import DecodingParams, decoding_layout, decoding_params, free

CACHE_AXES = ("batch", "kv_heads", "length", "head_dim")  # each layer's cache array
# The decode layout's placement: the training rules with the FSDP-sharded `embed` dim replicated,
# so weights are whole on every data/FSDP device and split over `tensor` by heads / MLP / vocab.
DECODE_AXIS_RULES = {**shd.LOGICAL_AXIS_RULES, "embed": None}
END_OF_TURN_TOKENS = (IM_END, ENDOFTEXT)  # the chat template's, named once in data/tokenizer.py


@dataclasses.dataclass(frozen=True)
class SamplerOutput:
    """Host (numpy) results; N = num_prompts * G rows, prompt-major (row = prompt * G + sample).

    tokens [N, max_new] int32: generated ids, pad_id after the end. logprobs [N, max_new] float32:
    log softmax(logits / T) of each sampled token, 0 after the end. lengths [N] int32: generated
    tokens including the stop token. truncated [N] bool: hit max_new_tokens without a stop token.
    entropy [N] float32: mean per-token entropy of softmax(logits / T). temperature [N] float32.
    prompt_tokens [N, P] int32 and prompt_mask [N, P] int32: the left-padded prompt block, so the
    full sequence is concat(prompt_tokens, tokens) of width P + max_new. versions [N, max_new] int32
    (paged sessions; None elsewhere): the weights version that drew each token, 0 after the end.
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray
    entropy: np.ndarray
    temperature: np.ndarray
    prompt_tokens: np.ndarray
    prompt_mask: np.ndarray
    versions: Optional[np.ndarray] = None


# ------------------------------------------------------------------------------ host-side helpers


def _per_row(value, rows: int, dtype, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype)
    if arr.ndim == 0:
        arr = np.full(rows, arr, dtype)
    if arr.shape != (rows,):
        raise ValueError(f"{name} must be a scalar or one value per row ({rows}), got shape {arr.shape}")
    return arr


def default_stop_token_ids(model_dir=None, tokenizer=None) -> list[int]:
    """EOS ids from config.json / generation_config.json and the tokenizer, plus its end-of-turn token."""
    ids: set[int] = set()

    def add(value):
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)

    for name in ("config.json", "generation_config.json"):
        path = os.path.join(os.fspath(model_dir), name) if model_dir is not None else None
        if path and os.path.exists(path):
            with open(path) as f:
                add(json.load(f).get("eos_token_id"))
    if tokenizer is not None:
        add(tokenizer.eos_token_id)
        vocab = tokenizer.get_vocab()
        add([vocab[t] for t in END_OF_TURN_TOKENS if t in vocab])
    return sorted(ids)


# ------------------------------------------------------------------------------ device functions


def _sortable(x: jax.Array) -> jax.Array:
    """float32 -> uint32 with the same order (IEEE bits, negatives flipped), for radix selection."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(1 << 31))


def _radix_select(keys: jax.Array, enough) -> jax.Array:
    """Per row, the largest uint32 t with enough(keys >= t) true (enough must hold at t = 0).

    32 passes over the vocabulary, one bit each from the top: far cheaper than sorting 150k logits
    per row and step, and exact (ties with the threshold are kept).
    """

    def body(j, t):
        candidate = t | (jnp.uint32(1) << (31 - j).astype(jnp.uint32))
        return jnp.where(enough(keys >= candidate[:, None]), candidate, t)

    return jax.lax.fori_loop(0, 32, body, jnp.zeros(keys.shape[:1], jnp.uint32))


def _truncate(scaled: jax.Array, top_p: jax.Array, top_k: jax.Array) -> jax.Array:
    """Mask (to -inf) every token outside the row's top-k, then outside its top-p nucleus.

    The nucleus is the most probable tokens, in order, up to and including the one at which their
    renormalised (after top-k) mass reaches top_p. Each step runs only if some row uses it.
    """
    vocab = scaled.shape[-1]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    logit_keys = _sortable(scaled)
    in_k = jax.lax.cond(
        jnp.any(k < vocab),
        lambda: logit_keys >= _radix_select(logit_keys, lambda m: jnp.sum(m, -1) >= k)[:, None],
        lambda: jnp.ones(scaled.shape, bool),
    )
    probs = jax.nn.softmax(jnp.where(in_k, scaled, -jnp.inf), axis=-1)
    prob_keys = jax.lax.bitcast_convert_type(probs, jnp.uint32)  # non-negative floats sort as their bits
    keep = jax.lax.cond(
        jnp.any(top_p < 1.0),
        lambda: (
            in_k
            & (
                (
                    prob_keys
                    >= _radix_select(prob_keys, lambda m: jnp.sum(jnp.where(m, probs, 0.0), -1) >= top_p)[:, None]
                )
                | (top_p >= 1.0)[:, None]
            )
        ),
        lambda: in_k,
    )
    return jnp.where(keep, scaled, -jnp.inf)


def _inverse_cdf_draw(probs: jax.Array, key: jax.Array, block: int = 256) -> jax.Array:
    """One index per row of ``probs [N, V]`` (non-negative, any positive total) by inverse CDF.

    One uniform per row instead of ``jax.random.categorical``'s Gumbel noise over the whole
    vocabulary (two logs per logit: ~15x the cost of the rest of sampling on CPU). Two levels,
    block sums then one block's prefix sums, keep it a few passes over the row. Never returns a
    zero-probability index: the chosen slot's prefix sum strictly exceeds the one before it, and
    float round-off at the very end is clipped back to the last positive entry.
    """
    rows, vocab = probs.shape
    pad = -vocab % block
    blocks = jnp.pad(probs, ((0, 0), (0, pad))).reshape(rows, -1, block)
    block_cdf = jnp.cumsum(jnp.sum(blocks, axis=-1), axis=-1)  # [N, V / block]
    # u in (0, total]: 1 - U(0, 1] so u = 0 (which would pick a leading zero) cannot occur.
    # A key array [N] gives each row its own key (the paged engine keys by sequence and position).
    # (typed keys: [N]; legacy uint32 keys: [N, 2], where one key alone is already [2]).
    per_row = key.ndim == (1 if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else 2)
    uniform = (
        jax.vmap(lambda k: jax.random.uniform(k, (), jnp.float32))(key)
        if per_row
        else jax.random.uniform(key, (rows,), jnp.float32)
    )
    u = (1.0 - uniform) * block_cdf[:, -1]
    which = jnp.minimum(jnp.sum(block_cdf < u[:, None], axis=-1), block_cdf.shape[-1] - 1)
    before = jnp.where(which > 0, jnp.take_along_axis(block_cdf, jnp.maximum(which - 1, 0)[:, None], -1)[:, 0], 0.0)
    inner = jnp.take_along_axis(blocks, which[:, None, None], axis=1)[:, 0]  # [N, block]
    offset = jnp.sum(jnp.cumsum(inner, axis=-1) < (u - before)[:, None], axis=-1)
    last_positive = block - 1 - jnp.argmax((inner > 0)[:, ::-1], axis=-1)
    return which * block + jnp.minimum(offset, last_positive)


def sample_tokens(
    logits: jax.Array, key: jax.Array, temperature: jax.Array, top_p: jax.Array, top_k: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One token per row from float logits [N, V]; returns (token, logprob, entropy), each [N].

    ``key``: one key for the batch, or a key array [N] with one key per row.

    logprob and entropy are of the untruncated softmax(logits / T) (T = 1 for greedy rows). The
    top-k/top-p selection runs only when some sampling row needs it (lax.cond).
    """
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)[:, None]
    logp = jax.nn.log_softmax(scaled, axis=-1)
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    needs_truncation = jnp.any(~greedy & ((top_p < 1.0) | (top_k > 0)))
    probs = jax.lax.cond(
        needs_truncation, lambda: jax.nn.softmax(_truncate(scaled, top_p, top_k), axis=-1), lambda: jnp.exp(logp)
    )
    sampled = _inverse_cdf_draw(probs, key)
    token = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    logprob = jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
    return token, logprob, entropy


@functools.partial(jax.jit, static_argnames=("config", "num_samples"))
def prefill(params: DecodingParams, prompt_ids, prompt_mask, *, config: DecoderConfig, num_samples: int):
    """Prompts [B, P] -> (their KV cache, one copy per prompt; next-token logits [B * G, V])."""
    batch, width = prompt_ids.shape
    positions = jnp.maximum(jnp.cumsum(prompt_mask, axis=-1) - 1, 0)
    hidden, cache = forward(
        params,
        config,
        prompt_ids,
        attention_mask=prompt_mask,
        positions=positions,
        cache=init_cache(config, batch, width),
        cache_index=0,
        return_hidden=True,
    )
    logits = lm_head(params, config, hidden[:, -1])
    return cache, jnp.repeat(logits, num_samples, axis=0)


def phase_ends(max_new_tokens: int, phases: int, multiple: int = 8) -> tuple[int, ...]:
    """Cache sizes of the decode phases: ``phases`` near-equal steps up to max_new, rounded up to ``multiple``."""
    return tuple(
        sorted(
            {min(max_new_tokens, -(-max_new_tokens * (j + 1) // phases // multiple) * multiple) for j in range(phases)}
        )
    )


@functools.partial(jax.jit, static_argnames=("config", "max_new_tokens", "phases"))
def decode(
    params: DecodingParams,
    prompt_cache,
    logits,
    prompt_mask,
    temperature,
    top_p,
    top_k,
    stop_ids,
    pad_id,
    rng,
    *,
    config: DecoderConfig,
    max_new_tokens: int,
    phases: int,
):
    """The decode loop; returns (tokens, logprobs, lengths, stopped, entropy).

    The prompts' cache is read as a `SharedPrefix` by all G rows of each prompt; the generated
    tokens' keys go to a [B * G, K, slots, D] cache made here and updated in place by the loop.
    The loop runs in `phases` stages whose caches grow to `phase_ends` slots, so a step reads
    about the filled part of the cache, not all max_new slots (4 stages: 5/8 of the reads); each
    stage is a separately compiled loop body.
    """
    rows, max_new = logits.shape[0], max_new_tokens
    prefix = SharedPrefix(prompt_cache, prompt_mask)
    prompt_lens = jnp.repeat(jnp.sum(prompt_mask, axis=-1), rows // prompt_mask.shape[0])
    ends = phase_ends(max_new, phases)
    cache = init_cache(config, rows, ends[0])

    def record(state, logits):
        i = state["i"]
        token, logprob, entropy = sample_tokens(logits, jax.random.fold_in(rng, i), temperature, top_p, top_k)
        live = ~state["done"]
        token = jnp.where(live, token, pad_id)
        return dict(
            state,
            i=i + 1,
            last=token,
            tokens=state["tokens"].at[:, i].set(token),
            logprobs=state["logprobs"].at[:, i].set(jnp.where(live, logprob, 0.0)),
            entropy=state["entropy"] + jnp.where(live, entropy, 0.0),
            lengths=state["lengths"] + live.astype(jnp.int32),
            done=state["done"] | (live & jnp.isin(token, stop_ids)),
        )

    def step(state):  # feed the last token at generated slot i - 1, then sample token i
        positions = (prompt_lens + state["i"] - 1)[:, None]
        logits, cache = forward(
            params,
            config,
            state["last"][:, None],
            positions=positions,
            cache=state["cache"],
            cache_index=state["i"] - 1,
            prefix=prefix,
        )
        return record(dict(state, cache=cache), logits[:, 0])

    def grow(cache, slots):  # more empty slots at the end of every layer's cache
        pad = lambda x: jnp.pad(x, ((0, 0), (0, 0), (0, slots - x.shape[2]), (0, 0)))  # noqa: E731
        return KVCache(*(tuple(shd.constrain(pad(x), CACHE_AXES) for x in part) for part in cache))

    state: dict[str, Any] = dict(
        i=jnp.int32(0),
        last=jnp.zeros((rows,), jnp.int32),
        cache=cache,
        tokens=jnp.full((rows, max_new), pad_id, jnp.int32),
        logprobs=jnp.zeros((rows, max_new), jnp.float32),
        entropy=jnp.zeros((rows,), jnp.float32),
        lengths=jnp.zeros((rows,), jnp.int32),
        done=jnp.zeros((rows,), bool),
    )
    state = record(state, logits)
    for end in ends:  # step i writes slot i - 1: a cache of `end` slots serves steps i <= end
        running = lambda state, end=end: (state["i"] < min(end + 1, max_new)) & ~jnp.all(state["done"])  # noqa: E731
        state = jax.lax.while_loop(running, step, dict(state, cache=grow(state["cache"], end)))
    entropy = state["entropy"] / jnp.maximum(state["lengths"], 1)
    return state["tokens"], state["logprobs"], state["lengths"], state["done"], entropy


def decode_shardings(config: DecoderConfig, mesh, rules: dict | None = None) -> DecodingParams:
    """``NamedSharding`` of every ``DecodingParams`` leaf on ``mesh`` (``rules``: ``DECODE_AXIS_RULES``)."""
    axes, sizes = decoding_layout(config, param_logical_axes(config), param_shapes(config))
    return shd.logical_to_sharding(axes, mesh, sizes, rules=DECODE_AXIS_RULES if rules is None else rules)


def decode_param_specs(config: DecoderConfig, mesh=None, rules: dict | None = None) -> DecodingParams:
    """``DecodingParams`` of ``jax.ShapeDtypeStruct`` (with the decode shardings): compile without weights."""
    params = jax.eval_shape(lambda: init_params(config, jax.random.key(0)))
    shapes = jax.eval_shape(functools.partial(decoding_params, config=config), params)
    if mesh is None:
        return shapes
    return jax.tree.map(
        lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, decode_shardings(config, mesh, rules)
    )


@functools.lru_cache(maxsize=8)
def decode_layout_fn(config: DecoderConfig, mesh, rules: tuple | None):
    """The jitted stored-params -> ``DecodingParams`` reshard, one per (config, mesh, rules)."""
    out = None if mesh is None else decode_shardings(config, mesh, None if rules is None else dict(rules))
    return jax.jit(functools.partial(decoding_params, config=config), out_shardings=out)


def to_decode_layout(params, config: DecoderConfig, mesh=None, rules: dict | None = None) -> DecodingParams:
    """The stored params (placed on ``mesh``) -> ``DecodingParams`` in the decode layout, once per call:
    a decode loop then reads replicated compute-dtype weights and gathers none per step."""
    return decode_layout_fn(config, mesh, None if rules is None else tuple(sorted(rules.items())))(params)


# ------------------------------------------------------------------------------ entry point


def padded_prompts(num_prompts: int, mesh) -> int:
    """The prompts one `generate` call runs: `num_prompts` padded up to a multiple of the mesh's
    data shards (data x fsdp), so every device holds whole rows (copies of the first prompt fill)."""
    shards = shd.batch_shards(mesh)
    return -(-num_prompts // shards) * shards


def generate(
    params,
    config: DecoderConfig,
    prompts: Sequence[Sequence[int]],
    *,
    num_samples: int,
    temperature,
    top_p=1.0,
    top_k=0,
    max_new_tokens: int,
    stop_token_ids: Sequence[int],
    pad_id: int,
    rng: jax.Array,
    mesh=None,
    prompt_buckets: Sequence[int] | None = None,
    decode_phases: int = 4,
    decode_rules: dict | None = None,
) -> SamplerOutput:
    """Sample `num_samples` responses for every prompt; see the module doc and `SamplerOutput`.

    temperature / top_p / top_k: a scalar or one value per row [num_prompts * num_samples].
    max_new_tokens and decode_phases (see `decode`) are static (a new value compiles new programs).
    With a `mesh`, rows are split over its data axes (the prompt count is padded to a multiple of
    them with copies, then cut off) and heads over its tensor axis; the weights are resharded once
    into the decode layout (module doc).
    decode_rules: logical-axis rules of that layout (default ``DECODE_AXIS_RULES``); pass
    ``sharding.LOGICAL_AXIS_RULES`` to keep the weights FSDP-sharded where a replicated compute-dtype
    copy does not fit (every decode step then all-gathers them).
    """
    num_prompts, rows = len(prompts), len(prompts) * num_samples
    if num_prompts == 0 or num_samples < 1 or max_new_tokens < 1 or decode_phases < 1:
        raise ValueError("need at least one prompt, num_samples >= 1, max_new_tokens >= 1 and decode_phases >= 1")
    temperature = _per_row(temperature, rows, np.float32, "temperature")
    top_p = _per_row(top_p, rows, np.float32, "top_p")
    top_k = _per_row(top_k, rows, np.int32, "top_k")
    if (temperature < 0).any() or ((top_p <= 0) | (top_p > 1)).any() or (top_k < 0).any():
        raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")
    width = prompt_bucket(max(len(p) for p in prompts), prompt_buckets)
    prompt_ids, prompt_mask = left_pad(prompts, width, pad_id)

    padded = padded_prompts(num_prompts, mesh)
    extra = (padded - num_prompts) * num_samples
    rep = lambda a: np.concatenate([a, np.repeat(a[:1], padded - num_prompts, axis=0)])  # noqa: E731
    row_pad = lambda a: np.concatenate([a, np.repeat(a[:1], extra)])  # noqa: E731
    args = dict(prompt_ids=rep(prompt_ids), prompt_mask=rep(prompt_mask))
    row_args = dict(temperature=row_pad(temperature), top_p=row_pad(top_p), top_k=row_pad(top_k))
    stop_ids = np.asarray(list(stop_token_ids), np.int32)
    if mesh is not None:
        params = jax.device_put(params, shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config)))
        put = lambda a: jax.device_put(a, shd.batch_sharding(mesh, a.ndim))  # noqa: E731
        args = {k: put(v) for k, v in args.items()}
        row_args = {k: put(v) for k, v in row_args.items()}

    prepared = to_decode_layout(params, config, mesh, decode_rules)  # once per call: no per-step weight traffic
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        cache, logits = prefill(
            prepared, args["prompt_ids"], args["prompt_mask"], config=config, num_samples=num_samples
        )
        results = decode(
            prepared,
            cache,
            logits,
            args["prompt_mask"],
            row_args["temperature"],
            row_args["top_p"],
            row_args["top_k"],
            stop_ids,
            jnp.int32(pad_id),
            rng,
            config=config,
            max_new_tokens=max_new_tokens,
            phases=decode_phases,
        )
    tokens, logprobs, lengths, stopped, entropy = (shd.to_host(x)[:rows] for x in results)
    free(prepared, params)  # the train step gets this memory back
    return SamplerOutput(
        tokens=tokens,
        logprobs=logprobs,
        lengths=lengths,
        truncated=~stopped,
        entropy=entropy,
        temperature=temperature,
        prompt_tokens=np.repeat(prompt_ids, num_samples, axis=0),
        prompt_mask=np.repeat(prompt_mask, num_samples, axis=0),
    )
