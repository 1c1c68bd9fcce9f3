"""Continuous batching on device: S decode slots over a paged KV cache, refilled from a queue.

Jitted programs per shape (`EngineShape`, all static):
- `admit` prefills a block of prompts once, writes their keys into pages shared (reference count
  G) by the prompt's G samples, stores each prompt's next-token logits and appends its (prompt,
  sample) pairs to the queue;
- `run` is one `lax.while_loop`. Each step feeds every live slot's last token (paged attention
  reads only the pages the longest live slot needs), samples the next and records it at the row
  of the slot's sequence. Every `refill_every` steps (or at once when no slot is live) finished
  slots release their pages and idle slots take the next queued pairs, whose first token is drawn
  from the stored prompt logits. It stops when the queue is empty and every slot is done, or after
  `budget` steps (so the host can hand finished groups on and push more prompts, then call again);
- `recompute` (partial rollouts after a weight update, optional) prefills again, with the new
  weights, the prompts still needed and every running sequence's tokens so far;
- with ``hold`` (multi-turn episodes) a finished sequence keeps its pages: `extend` makes a new
  prompt of it and the tokens that follow (the environment's turn), prefilling only those, over
  the kept keys, and queues one sample of it; `drop` gives a held sequence's pages back.

Everything per row is data: cap (<= the static output width), temperature, top-p, top-k. Token t of
sequence r is drawn with key fold_in(fold_in(rng, r), t), where r (`row_id`) counts the rows
`admit` queued over the session, or is the host's for an extended row, so the tokens do not
depend on S, the slot a sequence got or when it was admitted. Prompt p lives at
position p % max_prompts: a caller that retires finished prompts (`PagedSession.retire`) reuses
their positions, so one session can run for ever (partial rollouts). `version` (set by the host
between calls) is recorded with every token in `versions`: the weights that drew it.

A sequence's keys are contiguous in its page table (the prompt's full pages shared, a partly filled
last prompt page copied into the sequence's first own page as it takes a slot). An int8 pool
(``kv_dtype``) quantizes keys and values as they are written, in admit and in every step
(`paged_attention.QuantizedPages`). A slot is only admitted when the free pages cover every live
slot's remaining need up to its cap plus its own, so the pool can never run out.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from microcoder_jax.models import DecoderConfig, KVCache, decoding_params, forward, init_cache, lm_head
from microcoder_jax.models.decoding import is_decoding
from microcoder_jax.models import paged_attention as pa
from microcoder_jax.sampling import pages as pg
from microcoder_jax.sampling.static_sampler import sample_tokens
from microcoder_jax.sharding import constrain


@dataclasses.dataclass(frozen=True)
class EngineShape:
    """Static sizes: a new value compiles new programs."""

    slots: int  # S sequences decoded at once
    samples: int  # G samples per prompt
    max_prompts: int  # prompts the queue and outputs can hold over the whole call
    prompt_width: int  # P, the prompt bucket (a multiple of page_size)
    max_new: int  # W, the output width; each row's cap is data <= W
    page_size: int
    num_pages: int
    block_pages: int  # pages read per attention block
    refill_every: int
    shrink_at: int  # once the queue is empty, `run` returns when this few slots are live (0: never)
    kv_dtype: str = "model"  # the pool's dtype (`sampling.kv_dtype`): model (the model's), bfloat16, float32, int8
    hold: bool = False  # finished sequences keep their pages (row_table) for `extend` or `drop`

    @property
    def rows(self) -> int:
        return self.max_prompts * self.samples

    @property
    def prompt_pages(self) -> int:
        return self.prompt_width // self.page_size

    @property
    def table_width(self) -> int:
        entries = self.prompt_pages + -(-self.max_new // self.page_size)
        return -(-entries // self.block_pages) * self.block_pages


def own_pages(prompt_len, keys, page_size: int):
    """Pages a sequence owns once ``keys`` of its generated tokens are cached: from its prompt's
    partly filled last page (copied) to the page of its last key."""
    return -(-(prompt_len + keys) // page_size) - prompt_len // page_size


def max_own_pages(cap: int, page_size: int) -> int:
    """The most pages a sequence capped at ``cap`` tokens can own (its last token is never fed back)."""
    return -(-(page_size - 1 + cap - 1) // page_size)


def default_num_pages(max_prompts: int, prompt_width: int, slots: int, max_new: int, page_size: int) -> int:
    """A pool that holds every prompt's pages and S sequences at the cap: admission never waits."""
    return max_prompts * (prompt_width // page_size) + slots * max_own_pages(max_new, page_size)


def init_state(config: DecoderConfig, shape: EngineShape, pad_id) -> dict[str, Any]:
    n, s, w = shape.rows, shape.slots, shape.max_new
    none = jnp.int32(shape.num_pages)
    return dict(
        pool=pa.init_pool(config, shape.num_pages, shape.page_size, shape.kv_dtype),
        pages=pg.init_pages(shape.num_pages),
        prompt_pages=jnp.full((shape.max_prompts, shape.prompt_pages), none),
        prompt_len=jnp.zeros((shape.max_prompts,), jnp.int32),
        prompt_logits=jnp.zeros((shape.max_prompts, config.vocab_size), jnp.float32),
        prompts_used=jnp.int32(0),
        admitted=jnp.int32(0),  # prompts `admit` queued: their rows' sampling ids count on from it
        cap=jnp.ones((n,), jnp.int32),
        temperature=jnp.zeros((n,), jnp.float32),
        top_p=jnp.ones((n,), jnp.float32),
        top_k=jnp.zeros((n,), jnp.int32),
        tokens=jnp.full((n, w), pad_id, jnp.int32),
        logprobs=jnp.zeros((n, w), jnp.float32),
        lengths=jnp.zeros((n,), jnp.int32),
        stopped=jnp.zeros((n,), bool),
        entropy=jnp.zeros((n,), jnp.float32),
        versions=jnp.zeros((n, w), jnp.int32),
        row_id=jnp.arange(n, dtype=jnp.int32),  # the row's number over the session: its sampling key
        version=jnp.int32(0),
        prompt_version=jnp.zeros((shape.max_prompts,), jnp.int32),
        queue=jnp.zeros((n,), jnp.int32),
        head=jnp.int32(0),
        tail=jnp.int32(0),
        slot_seq=jnp.full((s,), -1, jnp.int32),
        slot_t=jnp.zeros((s,), jnp.int32),
        slot_last=jnp.zeros((s,), jnp.int32),
        slot_done=jnp.ones((s,), bool),
        table=jnp.full((s, shape.table_width), none),
        row_table=jnp.full((n if shape.hold else 0, shape.table_width), none),  # held rows' pages
        steps=jnp.int32(0),
        slot_steps=jnp.int32(0),
        live_steps=jnp.int32(0),
        reads=jnp.float32(0),
        own_reads=jnp.float32(0),
        recomputed=jnp.float32(0),  # tokens prefilled again by `recompute`
    )


def _store_prompts(pages, pool, cache, prompt_len, *, refs: int, columns: int, shape: EngineShape):
    """Allocate each new prompt's pages (`refs` rows read them) and write its keys and values from
    the dense prefill `cache` per layer into its first `columns` pages; returns (pages, pool, the
    prompts' page ids [a, prompt_pages]). Admit and extend both end this way."""
    need = jnp.arange(shape.prompt_pages)[None, :] < -(-prompt_len // shape.page_size)[:, None]
    pages, ids = pg.allocate(pages, need.reshape(-1), refs=refs)
    ids = ids.reshape(prompt_len.shape[0], shape.prompt_pages)
    pool = pa.PagePool(
        *(
            tuple(pa.write_prompt_pages(p, c, prompt_len, ids[:, :columns]) for p, c in zip(pool_part, cache_part))
            for pool_part, cache_part in zip(pool, cache)
        )
    )
    return pages, pool, ids


@functools.partial(jax.jit, static_argnames=("config", "shape"), donate_argnames=("state",))
def admit(
    state,
    params,
    prompt_ids,
    prompt_mask,
    count,
    cap,
    temperature,
    top_p,
    top_k,
    order,
    *,
    config: DecoderConfig,
    shape: EngineShape,
):
    """Prefill the first ``count`` of ``prompt_ids [A, P]`` (left-padded; P a multiple of the page
    size up to the shape's prompt width) and queue their samples.

    Per-row arrays are ``[A * G]`` in prompt-major order; ``order [A * G]`` lists the local rows
    in the order they join the queue (the first ``count * G`` entries are used).
    """
    a, width = prompt_ids.shape
    g, ps = shape.samples, shape.page_size
    positions = jnp.maximum(jnp.cumsum(prompt_mask, axis=-1) - 1, 0)
    hidden, cache = forward(
        params,
        config,
        prompt_ids,
        attention_mask=prompt_mask,
        positions=positions,
        cache=init_cache(config, a, width),
        cache_index=0,
        return_hidden=True,
    )
    assert cache is not None  # forward returns the cache it was given
    logits = lm_head(params, config, hidden[:, -1])
    real = jnp.arange(a) < count
    prompt_len = jnp.where(real, jnp.sum(prompt_mask, axis=-1), 0)
    # a narrower prompt needs no more pages than it has columns
    pages, pool, ids = _store_prompts(
        state["pages"], state["pool"], cache, prompt_len, refs=g, columns=width // ps, shape=shape
    )
    base, pushed = state["prompts_used"], state["admitted"]
    # prompt p lives at position p % max_prompts: a session that retires prompts reuses positions
    position = (base + jnp.arange(a)) % shape.max_prompts
    slot_of = jnp.where(real, position, shape.max_prompts)
    row_of = jnp.repeat(position, g) * g + jnp.tile(jnp.arange(g), a)  # each local row's global row
    rows = jnp.where(jnp.repeat(real, g), row_of, shape.rows)
    put = lambda name, value: state[name].at[rows].set(value, mode="drop")  # noqa: E731
    valid = jnp.arange(a * g) < count * g
    queue = (
        state["queue"]
        .at[jnp.where(valid, (state["tail"] + jnp.arange(a * g)) % shape.rows, shape.rows)]
        .set(row_of[order], mode="drop")
    )
    return dict(
        state,
        pool=pool,
        pages=pages,
        queue=queue,
        tail=state["tail"] + count * g,
        prompts_used=base + count,
        admitted=pushed + count,
        prompt_pages=state["prompt_pages"].at[slot_of].set(ids, mode="drop"),
        prompt_len=state["prompt_len"].at[slot_of].set(prompt_len, mode="drop"),
        prompt_logits=state["prompt_logits"].at[slot_of].set(logits, mode="drop"),
        prompt_version=state["prompt_version"].at[slot_of].set(state["version"], mode="drop"),
        cap=put("cap", cap),
        temperature=put("temperature", temperature),
        top_p=put("top_p", top_p),
        top_k=put("top_k", top_k),
        row_id=put("row_id", pushed * g + jnp.arange(a * g)),
        lengths=put("lengths", 0),  # a reused position starts empty (a fresh one already is); the
        stopped=put("stopped", False),  # host reads tokens, log-probs and versions up to lengths only
        entropy=put("entropy", 0.0),
    )


def _keys(rng, seq, t):
    return jax.vmap(lambda r, i: jax.random.fold_in(jax.random.fold_in(rng, r), i))(seq, t)


def _record(state, mask, token, logprob, entropy, stop_ids, pad_id, shape: EngineShape, version=None):
    """Write each masked slot's new token at its row and position (with the weights version that
    drew it: the session's, or ``version`` per slot); mark the slot done if it stopped."""
    seq = jnp.maximum(state["slot_seq"], 0)
    t = state["slot_t"]
    row = jnp.where(mask, seq, shape.rows)
    token = jnp.where(mask, token, pad_id)
    stop = mask & jnp.isin(token, stop_ids)
    done = stop | (t + 1 >= state["cap"][seq])
    return dict(
        state,
        tokens=state["tokens"].at[row, t].set(token, mode="drop"),
        logprobs=state["logprobs"].at[row, t].set(logprob, mode="drop"),
        versions=state["versions"].at[row, t].set(state["version"] if version is None else version, mode="drop"),
        lengths=state["lengths"].at[row].set(t + 1, mode="drop"),
        entropy=state["entropy"].at[row].add(entropy, mode="drop"),
        stopped=state["stopped"].at[row].set(stop, mode="drop"),
        slot_t=jnp.where(mask, t + 1, t),
        slot_last=jnp.where(mask, token, state["slot_last"]),
        slot_done=jnp.where(mask, done, state["slot_done"]),
    )


def _sample(state, logits, mask, rng, stop_ids, pad_id, shape, version=None):
    seq = jnp.maximum(state["slot_seq"], 0)
    token, logprob, entropy = sample_tokens(
        logits,
        _keys(rng, state["row_id"][seq], state["slot_t"]),
        state["temperature"][seq],
        state["top_p"][seq],
        state["top_k"][seq],
    )
    return _record(state, mask, token, logprob, entropy, stop_ids, pad_id, shape, version)


def release_finished(state: dict[str, Any], shape: EngineShape) -> dict[str, Any]:
    """Slots whose sequence is done give back their pages (prompt pages: one reference) and go idle;
    with ``shape.hold`` the sequence keeps them (its row of ``row_table``) for `extend` or `drop`."""
    finished = (state["slot_seq"] >= 0) & state["slot_done"]
    if shape.hold:
        rows = jnp.where(finished, state["slot_seq"], shape.rows)
        state = dict(state, row_table=state["row_table"].at[rows].set(state["table"], mode="drop"))
    else:
        state = dict(
            state, pages=pg.release(state["pages"], jnp.where(finished[:, None], state["table"], shape.num_pages))
        )
    return dict(
        state,
        slot_seq=jnp.where(finished, -1, state["slot_seq"]),
        table=jnp.where(finished[:, None], shape.num_pages, state["table"]),
    )


@functools.partial(jax.jit, static_argnames=("shape",), donate_argnames=("pages", "row_table"))
def drop(pages, row_table, rows, *, shape: EngineShape):
    """Held sequences ``rows [A]`` (out of range: none) give back their pages (``shape.hold``):
    (pages, row_table) after. Only these two of the state: the slots' width does not matter."""
    held = row_table.at[rows].get(mode="fill", fill_value=shape.num_pages)
    return pg.release(pages, held), row_table.at[rows].set(shape.num_pages, mode="drop")


@functools.partial(jax.jit, static_argnames=("config", "shape"), donate_argnames=("state",))
def extend(
    state,
    params,
    rows,
    tail_ids,
    context_len,
    count,
    cap,
    temperature,
    top_p,
    top_k,
    row_ids,
    first,
    *,
    config,
    shape: EngineShape,
):
    """The first ``count`` held sequences ``rows [A]`` go on as new prompts of one sample each: the
    whole context so far (its first ``context_len [A]`` tokens, ending with ``tail_ids [A, C]``, the
    last C, right-aligned) is the prompt. The keys before those C come from the sequence's pages;
    only the C tokens are prefilled (the host passes every token the pages lack among them: the
    answer's last, never fed, and the environment's turn). The new prompt's keys are written into
    pages of its own and the old sequence's pages given back; its one sample is queued with the
    row's ``cap, temperature, top_p, top_k [A]``, drawn with sampling ids ``row_ids [A]`` (the
    host's: a continued row's tokens then do not depend on when it continued).

    The new prompts are prompt indices ``first ..`` (a scalar); their samples join the queue at
    its front, ahead of the rows still queued: an episode in flight finishes before a new one
    starts, so the pages held outside the slots stay few."""
    a, c = tail_ids.shape
    g, ps, width, none = shape.samples, shape.page_size, shape.prompt_width, shape.num_pages
    real = jnp.arange(a) < count
    held = jnp.where(real[:, None], state["row_table"].at[rows].get(mode="fill", fill_value=none), none)
    start = width - context_len  # the context is left-padded to the prompt width
    column = jnp.arange(width)[None, :]
    src = jnp.clip(column - start[:, None], 0, shape.table_width * ps - 1)  # a column's index in the pages
    mask = (column >= start[:, None]) & real[:, None]

    def dense(pool_layer):  # [K, pages, ps, D] -> the rows' keys, left-padded: [A, K, width, D]
        keys = pa.read_pages(pool_layer, held, jnp.dtype(config.dtype))  # [A, K, table_width * ps, D]
        keys = jnp.take_along_axis(keys, src[:, None, :, None], axis=2)
        return jnp.where(mask[:, None, :, None], keys, 0).astype(config.dtype)

    cache = KVCache(*(tuple(dense(layer) for layer in part) for part in state["pool"]))
    positions = jnp.maximum(jnp.arange(width - c, width)[None, :] - start[:, None], 0)
    hidden, cache = forward(
        params,
        config,
        tail_ids,
        attention_mask=mask,
        positions=positions,
        cache=cache,
        cache_index=width - c,
        return_hidden=True,
    )
    assert cache is not None  # forward returns the cache it was given
    logits = lm_head(params, config, hidden[:, -1])
    prompt_len = jnp.where(real, context_len, 0)
    pages = pg.release(state["pages"], held)  # read above; the new prompt's pages may reuse them
    pages, pool, ids = _store_prompts(
        pages, state["pool"], cache, prompt_len, refs=1, columns=shape.prompt_pages, shape=shape
    )
    position = (first + jnp.arange(a)) % shape.max_prompts
    slot_of = jnp.where(real, position, shape.max_prompts)
    row = jnp.where(real, position * g, shape.rows)  # sample 0 of each new prompt; the others stay empty
    put = lambda name, value: state[name].at[row].set(value, mode="drop")  # noqa: E731
    head = state["head"] - count  # the queue's front
    queue = state["queue"].at[jnp.where(real, (head + jnp.arange(a)) % shape.rows, shape.rows)]
    return dict(
        state,
        pool=pool,
        pages=pages,
        row_table=state["row_table"].at[jnp.where(real, rows, shape.rows)].set(none, mode="drop"),
        queue=queue.set(position * g, mode="drop"),
        head=head,
        prompts_used=jnp.maximum(state["prompts_used"], first + count),
        prompt_pages=state["prompt_pages"].at[slot_of].set(ids, mode="drop"),
        prompt_len=state["prompt_len"].at[slot_of].set(prompt_len, mode="drop"),
        prompt_logits=state["prompt_logits"].at[slot_of].set(logits, mode="drop"),
        prompt_version=state["prompt_version"].at[slot_of].set(state["version"], mode="drop"),
        cap=put("cap", cap),
        temperature=put("temperature", temperature),
        top_p=put("top_p", top_p),
        top_k=put("top_k", top_k),
        row_id=put("row_id", row_ids),
        lengths=put("lengths", 0),
        stopped=put("stopped", False),
        entropy=put("entropy", 0.0),
    )


# The scheduling rule, as pure functions of a few arrays (``xp``: jax.numpy here, numpy in the
# planner's decode simulator, plan/decode_sim.py, which replays `run` without a model).


def outstanding_pages(live, prompt_len, cap, t, page_size: int, xp=jnp):
    """Pages the live slots may still allocate before their caps (admission keeps them free)."""
    return xp.sum(
        xp.where(live, own_pages(prompt_len, cap - 1, page_size) - own_pages(prompt_len, t - 1, page_size), 0)
    )


def admissions(idle, candidate, need, head, tail, free, xp=jnp):
    """Which queued pairs take idle slots at a refill: the next ones in queue order, one per idle
    slot, while their pages up to their caps (``need``, per candidate) fit in ``free``. Returns
    (taken per candidate, joins per slot, the sequence each joining slot takes)."""
    s = idle.shape[0]
    r = xp.arange(s)
    take = (r < xp.sum(idle)) & (head + r < tail) & (xp.cumsum(need) <= free)
    rank = xp.clip(xp.cumsum(idle) - 1, 0, s - 1)
    return take, idle & take[rank], candidate[rank]


def refill_due(steps, refill_every: int, any_live):
    """`run` refills every ``refill_every`` steps, or at once when no slot is live."""
    return (steps % refill_every == 0) | ~any_live


def pending(head, tail, slot_seq, slot_done, xp=jnp):
    """Queued pairs and a slot that is idle or done (a refill has work)."""
    return (head < tail) & xp.any((slot_seq < 0) | slot_done)


def keeps_running(steps_run, budget, live, head, tail, shrink_at: int, xp=jnp):
    """`run`'s loop condition: budget left, and a live slot or a queued pair, unless the queue is
    empty and only ``shrink_at`` or fewer slots are live (the host then shrinks S)."""
    shrinkable = (shrink_at > 0) & (head >= tail) & (xp.sum(live) <= shrink_at)
    return (steps_run < budget) & (xp.any(live) | (head < tail)) & ~shrinkable


def _refill(state: dict[str, Any], rng, stop_ids, pad_id, shape: EngineShape):
    state = release_finished(state, shape)
    s, ps, g, none = shape.slots, shape.page_size, shape.samples, shape.num_pages
    idle = state["slot_seq"] < 0
    seq, t = jnp.maximum(state["slot_seq"], 0), state["slot_t"]
    live = ~idle & ~state["slot_done"]
    prompt_len = state["prompt_len"][seq // g]
    outstanding = outstanding_pages(live, prompt_len, state["cap"][seq], t, ps)
    candidate = state["queue"][(state["head"] + jnp.arange(s)) % shape.rows]  # a ring (admit)
    need = own_pages(state["prompt_len"][candidate // g], state["cap"][candidate] - 1, ps)
    take, joins, new_seq = admissions(
        idle, candidate, need, state["head"], state["tail"], state["pages"].count - outstanding
    )
    prompt_len, prompt_row = state["prompt_len"][new_seq // g], state["prompt_pages"][new_seq // g]
    full = prompt_len // ps  # shared pages; a partly filled last one is copied to a page of the slot's own
    partial = joins & (prompt_len % ps > 0)
    shared_last = jnp.where(partial, jnp.take_along_axis(prompt_row, full[:, None], 1, mode="clip")[:, 0], none)
    pages, own = pg.allocate(state["pages"], partial)
    pool = pa.copy_pages(state["pool"], shared_last, own)
    entries = jnp.arange(shape.table_width)[None, :]
    prompt_row = jnp.concatenate([prompt_row, jnp.full((s, shape.table_width - shape.prompt_pages), none)], 1)
    row = jnp.where(entries < full[:, None], prompt_row, jnp.where(entries == full[:, None], own[:, None], none))
    state = dict(
        state,
        pool=pool,
        pages=pg.release(pages, shared_last),
        head=state["head"] + jnp.sum(take),
        slot_seq=jnp.where(joins, new_seq, state["slot_seq"]),
        slot_t=jnp.where(joins, 0, t),
        table=jnp.where(joins[:, None], row, state["table"]),
    )
    first = state["prompt_logits"][new_seq // g]  # the first token: from logits made at admit
    return _sample(state, first, joins, rng, stop_ids, pad_id, shape, state["prompt_version"][new_seq // g])


def _step(state, params, rng, stop_ids, pad_id, config: DecoderConfig, shape: EngineShape):
    """Feed every live slot's last token (generated index t - 1) and sample token t."""
    s, ps, bp, g = shape.slots, shape.page_size, shape.block_pages, shape.samples
    live = (state["slot_seq"] >= 0) & ~state["slot_done"]
    seq, t = jnp.maximum(state["slot_seq"], 0), state["slot_t"]
    prompt_len = state["prompt_len"][seq // g]
    index = prompt_len + t - 1  # the fed token's logical cache index (and position)
    entry = index // ps
    pages, new = pg.allocate(state["pages"], live & (index % ps == 0))
    table = (
        state["table"]
        .at[jnp.arange(s), jnp.where(new < shape.num_pages, entry, shape.table_width)]
        .set(new, mode="drop")
    )
    write_page = jnp.where(live, jnp.take_along_axis(table, entry[:, None], 1, mode="clip")[:, 0], shape.num_pages)
    lengths = jnp.where(live, index + 1, 0)
    view = pa.SlotView(table, lengths, pa.blocks_needed(lengths, ps, bp))
    logits, pool = pa.paged_decode_step(
        params, config, state["slot_last"], index, state["pool"], write_page, index % ps, view, bp
    )
    logits = constrain(logits, ("batch", "vocab"))
    state = dict(
        state,
        pool=pool,
        pages=pages,
        table=table,
        steps=state["steps"] + 1,
        slot_steps=state["slot_steps"] + s,
        live_steps=state["live_steps"] + jnp.sum(live),
        reads=state["reads"] + (s * bp * ps) * view.blocks.astype(jnp.float32),
        # what a paged kernel reads: each live slot's own blocks
        own_reads=state["own_reads"] + jnp.sum(jnp.where(live, -(-lengths // (bp * ps)) * (bp * ps), 0)),
    )
    return _sample(state, logits, live, rng, stop_ids, pad_id, shape)


@functools.partial(jax.jit, static_argnames=("config", "shape"), donate_argnames=("state",))
def run(state, params, stop_ids, pad_id, rng, budget, *, config: DecoderConfig, shape: EngineShape):
    """Decode until every queued sequence is done or ``budget`` steps have run; see the module doc."""
    if not is_decoding(params):  # callers pass the decode layout (PagedSession); converting here
        params = decoding_params(params, config)  # lets XLA sink the conversion into the loop
    start = state["steps"]

    def running(st):
        live = (st["slot_seq"] >= 0) & ~st["slot_done"]
        return keeps_running(st["steps"] - start, budget, live, st["head"], st["tail"], shape.shrink_at)

    def body(st):
        live = (st["slot_seq"] >= 0) & ~st["slot_done"]
        due = refill_due(st["steps"], shape.refill_every, jnp.any(live)) & pending(
            st["head"], st["tail"], st["slot_seq"], st["slot_done"]
        )
        st = jax.lax.cond(due, lambda x: _refill(x, rng, stop_ids, pad_id, shape), lambda x: x, st)
        return _step(st, params, rng, stop_ids, pad_id, config, shape)

    return release_finished(jax.lax.while_loop(running, body, state), shape)


def _chunk_starts(n: int, chunk: int) -> tuple[jax.Array, int]:
    """Starts and size of the blocks a loop over ``n`` items takes ``chunk`` at a time (the last
    block overlaps the one before rather than run past the end: every block has one shape)."""
    size = min(n, chunk)
    return jnp.asarray([min(lo, n - size) for lo in range(0, n, size)], jnp.int32), size


def _prefill(params, config: DecoderConfig, ids, mask):
    """Final hidden states and the KV cache of left-padded rows ``ids [B, T]``, as `admit` computes them."""
    positions = jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)
    cache = init_cache(config, ids.shape[0], ids.shape[1])
    hidden, cache = forward(
        params, config, ids, attention_mask=mask, positions=positions, cache=cache, cache_index=0, return_hidden=True
    )
    assert cache is not None  # forward returns the cache it was given
    return hidden, cache


def _write_sequences(pool, cache, column, page, offset):
    """Cache columns ``column [B, T]`` of every layer -> (``page``, ``offset``) ``[B, T]`` (page ids
    out of range: not written)."""

    def write(pool_layer, cache_layer):
        keys = jnp.take_along_axis(cache_layer, column[:, None, :, None], axis=2)  # [B, K, T, D]
        keys = keys.transpose(0, 2, 1, 3).reshape(-1, *keys.shape[1:2], keys.shape[3])
        return pa.write_tokens(pool_layer, page.reshape(-1), offset.reshape(-1), keys)

    return pa.PagePool(*(tuple(map(write, p, c)) for p, c in zip(pool, cache)))


def _rows_left(state, shape: EngineShape):
    """Rows still to decode: queued, or in a slot and not done."""
    n = shape.rows
    i = jnp.arange(n)
    at = jnp.where(i < state["tail"] - state["head"], state["queue"][(state["head"] + i) % n], n)
    running = (state["slot_seq"] >= 0) & ~state["slot_done"]
    left = jnp.zeros((n,), bool).at[at].set(True, mode="drop")
    return left.at[jnp.where(running, state["slot_seq"], n)].set(True, mode="drop"), running


@functools.partial(jax.jit, static_argnames=("config", "shape", "chunk"), donate_argnames=("state",))
def recompute(state, params, prompt_ids, prompt_mask, *, config: DecoderConfig, shape: EngineShape, chunk: int):
    """Rewrite with ``params`` the KV of everything left to decode (train.partial_recompute): the
    prompts of queued and running rows (pages and first-token logits, as `admit` writes them) and
    each running slot's own keys (its copy of the prompt's partly filled last page and every token
    it has fed), as a prefill of its whole sequence writes them. ``prompt_ids / prompt_mask
    [max_prompts, P]``: each position's prompt, left-padded (the host keeps them); ``chunk``:
    sequences per forward (bounds the prefill's activations)."""
    g, ps, width, w = shape.samples, shape.page_size, shape.prompt_width, shape.max_new
    left, running = _rows_left(state, shape)
    needed = jnp.any(left.reshape(shape.max_prompts, g), axis=1)  # prompt positions with work left
    none = shape.num_pages

    starts, size = _chunk_starts(shape.max_prompts, chunk)

    def prompts(k, carry):  # the prompts, as admit prefills them
        pool, logits = carry
        take = lambda x: jax.lax.dynamic_slice_in_dim(x, starts[k], size)  # noqa: E731
        hidden, cache = _prefill(params, config, take(prompt_ids), take(prompt_mask))
        keep = take(needed)
        pages = jnp.where(keep[:, None], take(state["prompt_pages"]), none)
        length = take(state["prompt_len"])
        pool = pa.PagePool(
            *(tuple(pa.write_prompt_pages(p, c, length, pages) for p, c in zip(*parts)) for parts in zip(pool, cache))
        )
        fresh = jnp.where(keep[:, None], lm_head(params, config, hidden[:, -1]), take(logits))
        return pool, jax.lax.dynamic_update_slice_in_dim(logits, fresh, starts[k], 0)

    pool, logits = jax.lax.fori_loop(0, len(starts), prompts, (state["pool"], state["prompt_logits"]))

    starts, size = _chunk_starts(shape.slots, chunk)
    index = jnp.arange(width + w)[None, :]  # a logical cache index: column + prompt_len - width

    def slots(k, pool):  # each running slot: its whole sequence
        take = lambda x: jax.lax.dynamic_slice_in_dim(x, starts[k], size)  # noqa: E731
        seq, live, t = jnp.maximum(take(state["slot_seq"]), 0), take(running), take(state["slot_t"])
        prompt_len = state["prompt_len"][seq // g]
        fed = jnp.arange(w)[None, :] < (t - 1)[:, None]  # the last token drawn is not fed yet
        ids = jnp.concatenate([prompt_ids[seq // g], state["tokens"][seq]], axis=1)
        _, cache = _prefill(params, config, ids, jnp.concatenate([prompt_mask[seq // g] > 0, fed], axis=1))
        own = (index >= (prompt_len // ps * ps)[:, None]) & (index < (prompt_len + t - 1)[:, None]) & live[:, None]
        entry = jnp.minimum(index // ps, shape.table_width - 1)
        page = jnp.where(own, jnp.take_along_axis(take(state["table"]), entry, 1), none)
        column = jnp.minimum(index + (width - prompt_len)[:, None], width + w - 1)
        return _write_sequences(pool, cache, column, page, jnp.broadcast_to(index % ps, page.shape))

    pool = jax.lax.fori_loop(0, len(starts), slots, pool)
    seq = jnp.maximum(state["slot_seq"], 0)
    slot_tokens = jnp.where(running, state["prompt_len"][seq // g] + state["slot_t"] - 1, 0)
    tokens = jnp.sum(slot_tokens) + jnp.sum(jnp.where(needed, state["prompt_len"], 0))
    return dict(
        state,
        pool=pool,
        prompt_logits=logits,
        prompt_version=jnp.where(needed, state["version"], state["prompt_version"]),
        recomputed=state["recomputed"] + tokens.astype(jnp.float32),
    )


SLOT_KEYS = ("slot_seq", "slot_t", "slot_last", "slot_done", "table")


@functools.partial(jax.jit, static_argnames=("shape", "slots"), donate_argnames=("state",))
def resize(state, *, shape: EngineShape, slots: int):
    """The same sequences on ``slots`` slots: occupied slots first, in order, then idle ones.

    The host shrinks S for the tail (compute follows the live rows) and grows it back when more
    prompts arrive; the caller makes sure the occupied slots fit.
    """
    order = jnp.argsort(state["slot_seq"] < 0, stable=True)
    pad = max(0, slots - shape.slots)
    fills = dict(slot_seq=-1, slot_t=0, slot_last=0, slot_done=True, table=shape.num_pages)

    def fit(name):
        x = state[name][order][:slots]
        return jnp.concatenate([x, jnp.full((pad, *x.shape[1:]), fills[name], x.dtype)]) if pad else x

    return dict(state, **{name: fit(name) for name in SLOT_KEYS})
