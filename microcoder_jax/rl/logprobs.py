"""Token log-probabilities at a per-row temperature, without materialising [N, S, vocab] logits.

The model returns final hidden states; the vocab projection, log-softmax and target gather run
over sequence chunks of `chunk` positions inside a rematerialised scan, so at most
[rows, chunk, vocab] fp32 logits exist at once, in the forward and in the backward pass. (A
sequence that fits in one chunk is not rematerialised: that would only add a vocab projection.)
Outputs are aligned with `tokens`: out[:, t] = log p(tokens[:, t] | tokens[:, :t]); out[:, 0] = 0.
Packed rows (rl.packing: segment ids and per-segment positions, a temperature per token) run the
same chunks; a segment's first token and padding get 0.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import models, sharding
from microcoder_jax.models import lora
from microcoder_jax.rl import packing as packing_lib


def _head(params, model_config, dtype):
    """The vocab projection's weight in the compute dtype, its einsum, and which dim is the vocab."""
    weight, axes, spec, vocab_dim = models.head_weight(params, model_config)
    # cast where the weight lies (FSDP-sharded), so the gather moves the compute dtype
    return sharding.constrain(weight.astype(dtype), axes), spec, vocab_dim


def _chunk_stats(w, spec, hidden, targets, inv_temp, vocab_axis=None):
    """log p(target) and entropy at temperature for one chunk: hidden [B, C, H] -> 2 x [B, C].

    With `vocab_axis` (inside shard_map) `w` holds this device's slice of the vocabulary: the
    log-sum-exp, the target logit and the entropy are reduced over that axis (psum / pmax).
    """
    b, c, h = hidden.shape
    logits = jnp.einsum(spec, hidden.reshape(-1, h), w, preferred_element_type=jnp.float32)
    logits = logits.reshape(b, c, -1) * inv_temp[..., None]
    reduce = (lambda x: x) if vocab_axis is None else functools.partial(jax.lax.psum, axis_name=vocab_axis)
    if vocab_axis is None:
        logz = jax.nn.logsumexp(logits, axis=-1)
        target_logit = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    else:
        local = logits.shape[-1]
        top = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(logits, -1)), vocab_axis)
        logz = top + jnp.log(reduce(jnp.sum(jnp.exp(logits - top[..., None]), -1)))
        t = targets - jax.lax.axis_index(vocab_axis) * local
        hit = (t >= 0) & (t < local)
        picked = jnp.take_along_axis(logits, jnp.clip(t, 0, local - 1)[..., None], axis=-1)[..., 0]
        target_logit = reduce(jnp.where(hit, picked, 0.0))
    # Entropy is a metric only: computed off the gradient path so backward skips it.
    sg_logits, sg_logz = jax.lax.stop_gradient(logits), jax.lax.stop_gradient(logz)
    probs = jnp.exp(sg_logits - sg_logz[..., None])
    entropy = sg_logz - reduce(jnp.sum(probs * sg_logits, axis=-1))
    return target_logit - logz, entropy


def _chunked_head(w, hidden, targets, inv_temp, *, spec, chunk, vocab_axis=None):
    """(log p, entropy) [B, T] over `chunk`-position chunks in a scan (rematerialised if several)."""
    b, t = targets.shape
    chunk = min(chunk, t)
    n_chunks = -(-t // chunk)
    pad = n_chunks * chunk - t
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
    targets = jnp.pad(targets, ((0, 0), (0, pad)))
    inv_temp = jnp.pad(inv_temp, ((0, 0), (0, pad)), constant_values=1.0)
    # [n_chunks, B, C, ...]: scan over chunks; remat so backward recomputes each chunk's logits.
    to_chunks = lambda x: x.reshape(b, n_chunks, chunk, *x.shape[2:]).swapaxes(0, 1)  # noqa: E731
    stats = functools.partial(_chunk_stats, spec=spec, vocab_axis=vocab_axis)
    if n_chunks > 1:  # one chunk holds the same logits either way: recomputing them would only cost time
        stats = jax.checkpoint(stats)

    def body(_, xs):
        return None, stats(w, hidden=xs[0], targets=xs[1], inv_temp=xs[2])

    _, out = jax.lax.scan(body, None, tuple(map(to_chunks, (hidden, targets, inv_temp))))
    return tuple(x.swapaxes(0, 1).reshape(b, -1)[:, :t] for x in out)


def head_logprobs(params, model_config, hidden, targets, inv_temp, chunk: int):
    """(log p(targets), entropy) [B, T] from final hidden states [B, T, H], in chunks.

    Under a mesh it runs in shard_map: the LM head is gathered once per call (not once per chunk,
    as the automatic partitioner did) with its vocabulary split over `tensor` where that divides
    it (a distributed log-sum-exp), rows over the data axes; its gradient is reduced once, at the
    boundary, instead of in every chunk.
    """
    w, spec, vocab_dim = _head(params, model_config, hidden.dtype)
    run = functools.partial(_chunked_head, spec=spec, chunk=chunk)
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or mesh.size == 1:
        return run(w, hidden, targets, inv_temp)
    from jax.sharding import PartitionSpec as P

    rows = sharding.logical_to_spec(("batch",), mesh, (hidden.shape[0],))[0]
    tensor = dict(mesh.shape).get("tensor", 1)
    vocab = "tensor" if tensor > 1 and w.shape[vocab_dim] % tensor == 0 else None
    w_spec = P(vocab, None) if vocab_dim == 0 else P(None, vocab)
    split = () if rows is None else (rows,) if isinstance(rows, str) else tuple(rows)

    def local(w, *xs):  # w varies over the row axes from here: its gradient is summed here, once
        return run(jax.lax.pcast(w, split, to="varying") if split else w, *xs, vocab_axis=vocab)

    return jax.shard_map(
        local,
        in_specs=(w_spec, P(rows, None, None), P(rows, None), P(rows, None)),
        out_specs=(P(rows, None), P(rows, None)),
    )(w, hidden, targets, inv_temp)


def shared_prompt_logprobs(params, model_config, tokens, attention_mask, temperature, chunk: int, shared):
    """`sequence_logprobs` of rows whose first `w` columns, a prompt, repeat in each group of `f`
    consecutive rows (`shared = (w, f)`, the G samples of a prompt at one temperature): those columns
    run through the layers once a group (models.forward_shared_prompt), and only the columns from w
    on through the LM head (the prompt's own log-probs are 0: no loss reads them)."""
    w, f = shared
    b, s = tokens.shape
    if temperature.ndim != 1:
        raise ValueError("a shared prompt needs one temperature per row [B], not per token")
    hid_p, hid_r = models.forward_shared_prompt(params, model_config, tokens, attention_mask, w, f)
    inv_temp = 1.0 / temperature.astype(jnp.float32)
    # the rest's first token is predicted by the prefix's last position, shared by the group's rows
    last = jnp.repeat(hid_p[:, -1:], f, axis=0)
    rest_in = jnp.concatenate([last, hid_r[:, :-1]], axis=1)
    rest = head_logprobs(
        params, model_config, rest_in, tokens[:, w:], jnp.broadcast_to(inv_temp[:, None], (b, s - w)), chunk
    )
    return tuple(jnp.pad(r, ((0, 0), (w, 0))) for r in rest)


def sequence_logprobs(
    params,
    model_config,
    tokens,
    attention_mask,
    temperature,
    chunk: int = 512,
    positions=None,
    segment_ids=None,
    shared=None,
):
    """Differentiable (log p(token), entropy) per position, both [B, S] f32, zero at position 0.

    `temperature` is per row [B] or per token [B, S]; with `segment_ids` (and `positions`) the rows
    are packed: attention stays within a segment, and a segment's first token and padding get 0.
    `shared = (w, f)`: the first w columns are a prompt no loss reads: they get 0 and skip the LM
    head; with f > 1 they also repeat in each group of f rows and run once a group
    (`shared_prompt_logprobs`).
    """
    if shared is not None:
        if segment_ids is not None:
            raise ValueError("packed rows (segment_ids) have no prompt block: pass shared=None")
        if not 0 <= shared[0] < tokens.shape[1]:
            raise ValueError(f"a prompt block of {shared[0]} columns leaves no column of {tokens.shape[1]} to score")
        if shared[1] > 1:
            return shared_prompt_logprobs(params, model_config, tokens, attention_mask, temperature, chunk, shared)
    hidden, _ = models.forward(
        params,
        model_config,
        tokens,
        attention_mask=attention_mask,
        positions=positions,
        segment_ids=segment_ids,
        return_hidden=True,
    )
    b, s = tokens.shape
    inv_temp = 1.0 / temperature.astype(jnp.float32)
    inv_temp = jnp.broadcast_to(inv_temp[:, None] if inv_temp.ndim == 1 else inv_temp, (b, s))
    first = max(shared[0], 1) if shared else 1  # the first column whose log-prob is computed
    logp, ent = head_logprobs(
        params, model_config, hidden[:, first - 1 : -1], tokens[:, first:], inv_temp[:, first:], chunk
    )
    logp, ent = (jnp.pad(x, ((0, 0), (first, 0))) for x in (logp, ent))
    if segment_ids is not None:  # a segment's first token has no context in its row; padding none
        same = jnp.pad(segment_ids[:, 1:] == segment_ids[:, :-1], ((0, 0), (1, 0))) & (segment_ids > 0)
        logp, ent = jnp.where(same, logp, 0.0), jnp.where(same, ent, 0.0)
    return logp, ent


def shared_in(shared, rows: int):
    """`sequence_logprobs`' `shared = (w, f)` for blocks of `rows` consecutive rows of a batch whose
    first w columns are a prompt, the same in each group of g rows (`shared = (w, g)`, g | the
    batch's rows; g = 1: not shared): the rows of a group inside one block (gcd(rows, g), 1 when a
    block holds one row of each); None when there is no prompt block."""
    if not shared or not shared[0]:
        return None
    return (shared[0], math.gcd(rows, shared[1]))


def micro_batched_logprobs(
    params,
    model_config,
    tokens,
    attention_mask,
    temperature,
    chunk: int = 512,
    micro_batch: int | None = None,
    positions=None,
    segment_ids=None,
    shared=None,
):
    """`sequence_logprobs`' log-probs, `micro_batch` rows at a time (lax.map) to bound memory.

    Traceable inside a larger jit (the train step computes old log-probs with it); each micro-batch
    keeps its rows split over the mesh's batch axes. Packed rows: pass `positions`, `segment_ids`.
    `shared = (w, g)`: the first w columns are a prompt, the same in each group of g rows (`shared_in`).
    """
    n = tokens.shape[0]
    in_micro = shared_in(shared, micro_batch if micro_batch and micro_batch < n else n)

    def one(xs):
        xs = {k: sharding.constrain(x, ("batch",) + (None,) * (x.ndim - 1)) for k, x in xs.items()}
        return sequence_logprobs(
            params, model_config, xs["t"], xs["m"], xs["temp"], chunk, xs.get("pos"), xs.get("seg"), in_micro
        )[0]

    xs = {"t": tokens, "m": attention_mask, "temp": temperature}
    if segment_ids is not None:
        xs.update(pos=positions, seg=segment_ids)
    if micro_batch is None or micro_batch >= n:
        return one(xs)
    if n % micro_batch:
        raise ValueError(f"{n} rows are not divisible by micro_batch={micro_batch}")
    split = lambda x: x.reshape(n // micro_batch, micro_batch, *x.shape[1:])  # noqa: E731
    out = jax.lax.map(one, jax.tree.map(split, xs))
    return out.reshape(n, -1)


def packed_logprobs(
    params,
    model_config,
    tokens,
    temperature,
    packing: packing_lib.Packing,
    chunk: int = 512,
    micro_batch: int | None = None,
):
    """Log-probs of padded rows [N, S] computed on their packed layout, returned as [N, S]."""
    s = tokens.shape[1]
    seg = packing.segment_ids
    out = micro_batched_logprobs(
        params,
        model_config,
        packing_lib.gather(tokens, packing),
        seg > 0,
        packing_lib.row_values(temperature.astype(jnp.float32), packing, s),
        chunk,
        micro_batch,
        positions=packing.positions,
        segment_ids=seg,
    )
    return packing_lib.scatter(out, packing, tokens.shape)


def batch_logprobs(
    params,
    model_config,
    tokens,
    attention_mask,
    temperature,
    chunk: int = 512,
    micro_batch: int | None = None,
    packing=None,
    shared=None,
):
    """[N, S] log-probs of padded rows, on their packed layout when `packing` is given: the one
    old- and reference-log-prob computation (traceable; the learner jits it). Forward-only, so a
    LoRA model's adapters are merged into its weights first, inside the program (models.lora.for_scoring:
    one matmul per projection; a temporary compute-dtype copy of the adapted matrices).
    `shared = (w, g)`: the first w columns are a prompt (not scored), under rl.share_prompts run
    once a group of g rows (`shared_in`)."""
    params, model_config = lora.for_scoring(params, model_config, models.param_logical_axes)
    if packing is None:
        return micro_batched_logprobs(
            params, model_config, tokens, attention_mask, temperature, chunk, micro_batch, shared=shared
        )
    if shared:
        raise ValueError("packed rows have no shared prompt block: rl.packing and rl.share_prompts exclude each other")
    return packed_logprobs(params, model_config, tokens, temperature, packing, chunk, micro_batch)


_jit_logprobs = jax.jit(batch_logprobs, static_argnames=("model_config", "chunk", "micro_batch", "shared"))


def prompt_width(response_mask, widths) -> int:
    """The widest of `widths` (the prompt buckets) at or before every row's first response column:
    the prompt columns, whose log-probs no loss reads; 0 when none is, no row has a response, or the
    mask spans other hosts. Host-side: the static width the learner's programs take."""
    if isinstance(response_mask, jax.Array) and not response_mask.is_fully_addressable:
        return 0
    m = np.asarray(response_mask)
    cols = np.flatnonzero(m.any(axis=0))
    if not cols.size:
        return 0
    first = min(int(cols[0]), m.shape[1] - 1)
    return max((int(w) for w in widths if 0 < w <= first), default=0)


def shared_prompt_width(tokens, attention_mask, temperature, group: int, widths, cap: int | None = None) -> int:
    """The widest of `widths` (the prompt buckets) whose first columns are identical (tokens, mask)
    in every group of `group` consecutive rows sampled at one temperature, at most `cap` and short
    of the last column; 0 when none is. Host-side: the static width the shared-prompt programs take.
    """
    if any(isinstance(x, jax.Array) and not x.is_fully_addressable for x in (tokens, attention_mask, temperature)):
        return 0
    t, m, temp = np.asarray(tokens), np.asarray(attention_mask), np.asarray(temperature)
    n, s = t.shape
    if group < 2 or n % group or temp.ndim != 1:
        return 0
    temp = temp.reshape(-1, group)
    if not (temp == temp[:, :1]).all():
        return 0
    tg, mg = t.reshape(-1, group, s), m.reshape(-1, group, s)
    same = ((tg == tg[:, :1]) & (mg == mg[:, :1])).all(axis=(0, 1))
    limit = min(s if same.all() else int(np.argmin(same)), s - 1, s if cap is None else cap)
    return max((int(w) for w in widths if 0 < w <= limit), default=0)


def check_temperature(temperature) -> None:
    """Raise if a known temperature is <= 0: softmax(logits / T) has no log-probs at T = 0.

    Traced values and arrays spread over other hosts are not read (that would need a transfer).
    """
    if isinstance(temperature, jax.core.Tracer):  # pyright: ignore[reportAttributeAccessIssue]
        return
    if isinstance(temperature, jax.Array) and not temperature.is_fully_addressable:
        return
    t = np.asarray(temperature, np.float32)
    if t.size and not np.all(t > 0):
        raise ValueError(
            f"log-probs need a temperature > 0 in every row, got min {float(t.min()):g}: T = 0 is "
            "greedy decoding, whose token distribution is one-hot, so there is no policy ratio to "
            "train on. Train on rollouts sampled at T > 0 (e.g. sampling temperature 1.0); keep "
            "greedy (T = 0) decoding for evaluation."
        )


def compute_logprobs(
    params,
    model_config,
    tokens,
    attention_mask,
    temperature,
    chunk: int = 512,
    micro_batch: int | None = None,
    packing=None,
    shared=None,
):
    """log p(tokens[:, t] | tokens[:, :t]) at each row's temperature, [N, S] f32 (column 0 = 0).

    Jitted; rows run `micro_batch` at a time to bound activation memory. Used for old log-probs at
    the rollout temperature and for reference log-probs when the KL term is on. Raises on T <= 0.
    `packing` (an rl.packing.Packing of these rows): the forward runs on the packed rows, then the
    result goes back to the [N, S] layout (0 outside the rows' real tokens and at their first).
    `shared = (w, g)`: the first w columns are a prompt: log-probs 0, no LM head; with g > 1 the
    same in each group of g rows, run once a group (`prompt_width`, `shared_prompt_width`).
    """
    check_temperature(temperature)
    return _jit_logprobs(
        params,
        model_config,
        tokens,
        attention_mask,
        temperature,
        chunk=chunk,
        micro_batch=micro_batch,
        packing=packing,
        shared=shared,
    )


compute_logprobs.jitted = _jit_logprobs  # the jitted program itself: AOT lowering, compile counts
