"""The paged sampler's host side: push prompts, run the engine, hand finished groups on as they end.

`generate_paged` has `sampler.generate`'s signature and returns the same `SamplerOutput`
(rows prompt-major) plus the engine knobs: `slots` (S), `page_size`, `refill_every`, `kv_dtype`, per-row
`caps`, and `on_group_done(prompt_index, SamplerOutput of its G rows)`, called as each group
finishes (the engine returns to the host every `report_every` steps to check), so judging can
overlap the tail. `PagedSession` is the same machinery for callers that push more prompts while
it runs (DAPO refills): `push` queues prompts behind the ones still running, in the same programs.
With ``hold`` (multi-turn episodes) finished rows keep their KV: `extend` continues a row with the
environment's turn appended (only the new tokens are prefilled) and `drop` frees a row that ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from microcoder_jax import sharding as shd
from microcoder_jax.models import DecoderConfig, param_logical_axes, param_shapes
from microcoder_jax.sampling import paged_engine as engine
from microcoder_jax.models.decoding import free
from microcoder_jax.sampling.static_sampler import SamplerOutput, _per_row, left_pad, prompt_bucket, to_decode_layout

NO_LIMIT = np.iinfo(np.int32).max
RECOMPUTE_CHUNK = 8  # sequences per prefill when set_params recomputes KV (the planner counts the same)
# Context columns one extend block gathers into its dense cache (rows x the prompt width): 64
# prompts of 512, the admit block of the paper's config; a 8,704-token turn width extends 2 rows
# at a time, so the dense copy stays at admit's size
EXTEND_COLUMNS = 64 * 512
MAX_ADMIT = 64  # prompts prefilled per admit call, by default
EXTEND_IDS = 1 << 30  # extend's default sampling ids start here (a push's count up from 0)


def default_slots(rows: int) -> int:
    """S when not given: every row at once up to 256 slots (the planner should size it on TPU)."""
    return max(1, min(rows, 256))


def call_slots(slots: int | None, rows: int) -> int:
    """S for a call of ``rows`` rows: ``slots`` (the default when None or 0), never more than the rows."""
    return min(slots or default_slots(rows), rows)


def held_session_pages(prompts: int, prompt_width: int, rows: int, widest: int, max_new: int, page_size: int) -> int:
    """Pages a holding session (multi-turn episodes) never runs out of: the first prompts at their
    width (shared by their samples), and per row at most one prompt of its own up to the widest
    turn's context (an extend's) and one answer's pages."""
    return prompts * -(-prompt_width // page_size) + rows * (
        -(-widest // page_size) + engine.max_own_pages(max_new, page_size)
    )


def extend_block(prompt_width: int, max_admit: int, block_rows: int | None = None) -> int:
    """Rows per extend program: at most `max_admit`, `block_rows` (when given) and EXTEND_COLUMNS
    context columns at the session's prompt width (a power of two)."""
    most = min(max_admit, 1 << max(0, (EXTEND_COLUMNS // prompt_width).bit_length() - 1))
    return min(most, block_rows) if block_rows else most


def default_tail_slots(slots: int) -> int:
    """The smallest S the tail shrinks to: S / 8."""
    return max(1, slots // 8)


def tail_sizes(slots: int, tail_slots: int) -> list[int]:
    """The S values the tail steps down through once the queue is empty, largest first: S times 1,
    3/4, 1/2, 3/8, 1/4, ... down to ``tail_slots`` (each size compiles `run` once)."""
    sizes, top = {slots}, slots
    while top > tail_slots:
        sizes.update((max(tail_slots, top * 3 // 4), max(tail_slots, top // 2)))
        top //= 2
    return sorted(sizes, reverse=True)


def shrink_at(sizes: list[int], slots: int) -> int:
    """The next size below ``slots`` (``run`` returns for a resize at that many live slots), or 0."""
    return max([z for z in sizes if z < slots], default=0)


def tail_resize(sizes: list[int], occupied: int, slots: int, queued: bool) -> int | None:
    """After `engine.run` returns: the smaller S the tail moves to (the smallest size that holds the
    occupied slots), or None to stop (prompts still queued, nothing occupied, or no smaller size)."""
    target = min([z for z in sizes if z >= occupied], default=slots)
    return None if queued or not occupied or target >= slots else target


def _on_devices_of(params, mesh) -> bool:
    """Whether every leaf already lives on ``mesh``'s devices in its order (maybe another mesh shape,
    e.g. the training mesh): the decode-layout reshard then moves them with no stored-layout copy."""
    order = tuple(mesh.devices.flat)
    return all(
        isinstance(x, jax.Array)
        and isinstance(x.sharding, jax.sharding.NamedSharding)
        and tuple(x.sharding.mesh.devices.flat) == order  # pyright: ignore[reportOptionalMemberAccess]
        for x in jax.tree.leaves(params)
    )  # (an array's mesh has devices; only an AbstractMesh has none)


@jax.jit
def _take_rows(arrays: dict, rows: jax.Array) -> dict:
    return {k: jnp.take(v, rows, axis=0) for k, v in arrays.items()}


class PagedSession:
    """One engine: a page pool, S slots and a queue with room for ``max_prompts`` prompts x G."""

    def __init__(
        self,
        params,
        config: DecoderConfig,
        *,
        num_samples: int,
        max_prompts: int,
        max_new_tokens: int,
        prompt_width: int,
        stop_token_ids: Sequence[int],
        pad_id: int,
        rng: jax.Array,
        slots: int,
        page_size: int = 16,
        refill_every: int = 4,
        tail_slots: int | None = None,
        block_pages: int | None = None,
        num_pages: int | None = None,
        max_admit: int = MAX_ADMIT,
        mesh=None,
        kv_dtype: str = "model",
        version: int = 0,
        hold: bool = False,
    ):
        tail_slots = default_tail_slots(slots) if tail_slots is None else tail_slots
        if min(num_samples, max_prompts, max_new_tokens, slots, page_size, refill_every, max_admit, tail_slots) < 1:
            raise ValueError(
                "num_samples, max_prompts, max_new_tokens, slots, page_size, refill_every, "
                "tail_slots and max_admit must all be >= 1"
            )
        if prompt_width % page_size:
            raise ValueError(
                f"prompt bucket {prompt_width} is not a multiple of page_size={page_size}; "
                "pick a page size that divides the prompt buckets (8 or 16 for the default ones)"
            )
        block_pages = block_pages or max(1, 64 // page_size)
        need = engine.max_own_pages(max_new_tokens, page_size)
        # a holding session's caller sizes its pool for its turns; it must hold one prompt at the width
        prompt_pages = (1 if hold else max_prompts) * (prompt_width // page_size)
        num_pages = num_pages or engine.default_num_pages(max_prompts, prompt_width, slots, max_new_tokens, page_size)
        if num_pages < prompt_pages + need:
            raise ValueError(
                f"num_pages={num_pages} cannot hold the prompts ({prompt_pages} pages) and one "
                f"sequence at the cap ({need}); raise it to at least {prompt_pages + need}"
            )
        self.sizes = tail_sizes(slots, min(tail_slots, slots))
        self.shape = engine.EngineShape(
            slots=slots,
            samples=num_samples,
            max_prompts=max_prompts,
            prompt_width=prompt_width,
            max_new=max_new_tokens,
            page_size=page_size,
            num_pages=num_pages,
            block_pages=block_pages,
            refill_every=refill_every,
            shrink_at=shrink_at(self.sizes, slots),
            kv_dtype=kv_dtype,
            hold=hold,
        )
        self.full_shape = self.shape
        self.config, self.mesh, self.max_admit = config, mesh, max_admit
        self.pad_id, self.rng = pad_id, rng
        self.stop_ids = jnp.asarray(np.asarray(list(stop_token_ids), np.int32))
        self.params = None
        self._take(params)  # the decode layout once per session: a step then gathers no weight
        # per position (prompt p at p % max_prompts): what push wrote there
        self.prompt_ids = np.zeros((max_prompts, prompt_width), np.int32)
        self.prompt_mask = np.zeros((max_prompts, prompt_width), np.int32)
        self.temperature = np.zeros((max_prompts * num_samples,), np.float32)
        self.samples_of = np.full((max_prompts,), num_samples, np.int64)  # an extend's prompt: 1
        self.extend_columns = 0  # token columns extend prefilled (rows x chunk, padding included)
        self.held: set[int] = set()  # rows (position * G + sample) keeping their pages (hold)
        self.reported_rows = np.zeros((max_prompts * num_samples,), bool)  # hold: rows `run` reported finished
        self.extended = 0  # rows extend continued so far (their default sampling ids count on)
        self.finished_rows: list[tuple[int, int]] = []  # hold: the rows the last `run` saw finish
        self.pushed = 0  # prompts pushed so far (prompt indices count on; positions wrap)
        self.reported: set[int] = set()
        self.retired: set[int] = set()  # prompts whose positions push may reuse (`retire`)
        self.version = int(version)
        with self._mesh():
            self.state = engine.init_state(config, self.shape, pad_id)
        if self.version:
            self.state = dict(self.state, version=jnp.asarray(self.version, jnp.int32))

    def _mesh(self):
        return jax.set_mesh(self.mesh) if self.mesh is not None else contextlib.nullcontext()

    @property
    def num_prompts(self) -> int:
        """Prompts pushed so far (their indices are 0 .. num_prompts - 1)."""
        return self.pushed

    def room(self) -> int:
        """Prompts a push can take now: positions never used, or used by retired prompts."""
        m = self.shape.max_prompts
        free = 0
        for p in range(self.pushed, self.pushed + m):
            if p - m >= 0 and p - m not in self.retired:
                break
            free += 1
        return free

    def retire(self, prompts: Sequence[int]) -> None:
        """The caller is done with these (finished, read) prompts: push may reuse their positions."""
        for p in prompts:
            if p not in self.reported:
                raise ValueError(f"prompt {p} has not finished; only finished prompts can be retired")
            if self.held.intersection(self._rows(p)):
                raise ValueError(f"prompt {p} has held rows; extend or drop them before retiring it")
            self.retired.add(int(p))

    def active(self) -> list[int]:
        """Prompts pushed and not retired, oldest first."""
        return [p for p in range(max(0, self.pushed - self.shape.max_prompts), self.pushed) if p not in self.retired]

    def _take(self, params) -> None:
        """Decode with ``params`` from now on: placed on the session's mesh and converted to the
        decode layout once (the previous copy, if any, freed first; close() frees this one)."""
        if self.params is not None:
            free(self.params, self._stored)
        mesh, config = self.mesh, self.config
        placed = (
            params
            if mesh is None or _on_devices_of(params, mesh)
            else jax.device_put(params, shd.logical_to_sharding(param_logical_axes(config), mesh, param_shapes(config)))
        )
        self.params, self._stored = to_decode_layout(placed, config, mesh), placed

    def queued(self) -> int:
        """Rows pushed that have not taken a slot yet."""
        return self._scalar("tail") - self._scalar("head")

    def set_params(self, params, version: int, *, recompute: bool = False, chunk: int = RECOMPUTE_CHUNK) -> None:
        """Decode from now on with ``params`` (the policy after ``version`` learner updates); every
        token records the version that drew it. The sequences running continue on their kept KV, or
        with ``recompute`` on KV the new weights write again (their prompts and every token fed so
        far, ``chunk`` sequences per prefill; counted in stats()["recomputed"])."""
        self._check_open()
        self._take(params)
        self.version = int(version)
        self.state = dict(self.state, version=jnp.asarray(self.version, jnp.int32))
        if recompute:
            if self.shape.slots != self.full_shape.slots:  # one program: at the full slot width
                self._resize(self.full_shape.slots)
            with self._mesh():
                self.state = engine.recompute(
                    self.state,
                    self.params,
                    jnp.asarray(self.prompt_ids),
                    jnp.asarray(self.prompt_mask),
                    config=self.config,
                    shape=self.shape,
                    chunk=chunk,
                )

    def push(
        self,
        prompts: Sequence[Sequence[int]],
        *,
        temperature,
        top_p=1.0,
        top_k=0,
        caps=None,
        queue_order: Sequence[int] | None = None,
        width: int | None = None,
        block: int | None = None,
    ) -> range:
        """Prefill ``prompts`` and queue their G samples each; returns their prompt indices.

        temperature / top_p / top_k / caps: a scalar or one value per row (len(prompts) * G); caps
        default to max_new_tokens. queue_order (tests): a permutation of these rows, the order in
        which they take slots (only for a push of at most max_admit prompts). width: the prefill's
        width (a multiple of the page size, at most the session's prompt width, its default).
        block: the prompts of every admit program (padding included; default a power of two per
        call): a caller that pushes varying numbers passes one value and compiles one program.
        """
        self._check_open()
        shape, g = self.shape, self.shape.samples
        n, rows = len(prompts), len(prompts) * g
        if n == 0 or n > self.room():
            raise ValueError(
                f"push of {n} prompts: need 1..{self.room()} "
                f"(max_prompts={shape.max_prompts}, {len(self.active())} pushed and not retired)"
            )
        temperature = _per_row(temperature, rows, np.float32, "temperature")
        top_p = _per_row(top_p, rows, np.float32, "top_p")
        top_k = _per_row(top_k, rows, np.int32, "top_k")
        caps = _per_row(shape.max_new if caps is None else caps, rows, np.int32, "caps")
        if (temperature < 0).any() or ((top_p <= 0) | (top_p > 1)).any() or (top_k < 0).any():
            raise ValueError("need temperature >= 0, 0 < top_p <= 1 and top_k >= 0")
        if ((caps < 1) | (caps > shape.max_new)).any():
            raise ValueError(f"caps must be in 1..max_new_tokens={shape.max_new}")
        if queue_order is not None and (n > self.max_admit or sorted(queue_order) != list(range(rows))):
            raise ValueError(
                f"queue_order must be a permutation of range({rows}) for a push of <= {self.max_admit} prompts"
            )
        width = shape.prompt_width if width is None else width
        if width % shape.page_size or not 0 < width <= shape.prompt_width:
            raise ValueError(
                f"push width {width}: need a multiple of page_size={shape.page_size} up to the prompt "
                f"width {shape.prompt_width}"
            )
        ids, mask = left_pad(prompts, width, self.pad_id)
        first = self.num_prompts
        if self.shape.slots != self.full_shape.slots:  # the tail had shrunk S: back to full width
            self._resize(self.full_shape.slots)
        if block is not None and not 1 <= block <= self.max_admit:
            raise ValueError(f"push block={block}: need 1..max_admit={self.max_admit}")
        step = block or self.max_admit
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            size = block or 1 << (hi - lo - 1).bit_length()  # admit blocks are powers of two: few compiles
            fill = (
                lambda a, lo=lo, hi=hi, size=size, k=1: np.concatenate(  # noqa: E731
                    [a[lo * k : hi * k], np.repeat(a[lo * k : lo * k + k], size - (hi - lo), axis=0)]
                )
            )
            order = np.arange(size * g, dtype=np.int32)
            if queue_order is not None:
                order[:rows] = np.asarray(queue_order, np.int32)
            with self._mesh():
                self.state = engine.admit(
                    self.state,
                    self.params,
                    fill(ids),
                    fill(mask),
                    jnp.int32(hi - lo),
                    fill(caps, k=g),
                    fill(temperature, k=g),
                    fill(top_p, k=g),
                    fill(top_k, k=g),
                    order,
                    config=self.config,
                    shape=self.full_shape,
                )
        at = (first + np.arange(n)) % shape.max_prompts
        self.prompt_ids[at], self.prompt_mask[at] = left_pad(prompts, shape.prompt_width, self.pad_id)
        self.temperature[(at[:, None] * g + np.arange(g)).reshape(-1)] = temperature
        self.samples_of[at] = g
        self.reported_rows[(at[:, None] * g + np.arange(g)).reshape(-1)] = False
        self.pushed += n
        return range(first, first + n)

    def _rows(self, prompt: int) -> list[int]:
        """The rows of a prompt index: its G samples, or the one of an extend's prompt."""
        at = prompt % self.shape.max_prompts
        return [at * self.shape.samples + j for j in range(int(self.samples_of[at]))]

    def extend(
        self,
        rows: Sequence[tuple[int, int]],
        contexts: Sequence[Sequence[int]],
        *,
        temperature,
        top_p=1.0,
        top_k=0,
        caps=None,
        chunk: int | None = None,
        block_rows: int | None = None,
        row_ids: Sequence[int] | None = None,
    ) -> range:
        """Continue held rows (``hold``): row (prompt index, sample) gets one more sample, its prompt
        ``contexts[i]``, the whole conversation so far: its prompt, its answer and the tokens that
        follow (the environment's turn). The kept keys are reused; only the tokens the pages lack
        are prefilled. The row's pages go to the new prompt (the row is no longer held); returns
        the new prompt indices (one sample each). The new samples are queued ahead of the rows
        still queued, in this order. row_ids: the sampling id each new sample draws its tokens
        with (default: ids of their own, counting on from EXTEND_IDS; a caller that gives an
        episode's turn an id of its own gets the same tokens whenever it continues the row).
        temperature / top_p / top_k / caps as in push;
        chunk: the tokens each row prefills (the new ones and, before them, some it already had),
        a static shape: by default the power of two covering the most new tokens of this call;
        a caller that knows its bound passes it (one program for every call). block_rows: the
        rows of every extend program (padding included; default a power of two per block): a
        caller whose number of continuing rows varies passes one value and compiles one program."""
        self._check_open()
        shape, g, n = self.shape, self.shape.samples, len(rows)
        if not shape.hold:
            raise ValueError("extend needs a session opened with hold=True (finished rows keep their KV)")
        if n == 0 or n != len(contexts) or n > self.room():
            raise ValueError(f"extend of {n} rows with {len(contexts)} contexts: need 1..{self.room()} of each")
        temperature = _per_row(temperature, n, np.float32, "temperature")
        top_p, top_k = _per_row(top_p, n, np.float32, "top_p"), _per_row(top_k, n, np.int32, "top_k")
        caps = _per_row(shape.max_new if caps is None else caps, n, np.int32, "caps")
        if ((caps < 1) | (caps > shape.max_new)).any():
            raise ValueError(f"caps must be in 1..max_new_tokens={shape.max_new}")
        flat = [(p % shape.max_prompts) * g + j for p, j in rows]
        outs = self._kept(rows)
        new = []
        for (p, j), row, ctx, kept in zip(rows, flat, contexts, outs):
            if row not in self.held:
                raise ValueError(f"row ({p}, {j}) is not held: it has not finished, or was extended or dropped")
            if len(ctx) > shape.prompt_width:
                raise ValueError(
                    f"context of row ({p}, {j}) has {len(ctx)} tokens, more than the prompt width {shape.prompt_width}"
                )
            if len(ctx) <= len(kept) or list(ctx[: len(kept)]) != kept:
                raise ValueError(
                    f"context of row ({p}, {j}) does not continue the row: it must start with the row's prompt "
                    f"and answer ({len(kept)} tokens) and add at least one token"
                )
            new.append(len(ctx) - len(kept))  # the answer's last token (never fed) and what follows
        if chunk is None:
            chunk = min(shape.prompt_width, max(shape.page_size, 1 << (max(new) - 1).bit_length()))
        elif not max(new) <= chunk <= shape.prompt_width:
            raise ValueError(
                f"extend chunk={chunk}: need at least the {max(new)} new tokens of a row and at most the "
                f"prompt width {shape.prompt_width}"
            )
        ids = np.asarray(EXTEND_IDS + self.extended + np.arange(n) if row_ids is None else row_ids, np.int64)
        if ids.shape != (n,) or (ids < 0).any() or (ids > NO_LIMIT).any():
            raise ValueError(f"row_ids: need {n} ids in 0..{NO_LIMIT}, one per row")
        ids = ids.astype(np.int32)
        first = self.num_prompts
        if self.shape.slots != self.full_shape.slots:
            self._resize(self.full_shape.slots)
        block = extend_block(shape.prompt_width, self.max_admit, block_rows)
        # back to front: each block joins the queue's front, so the rows end up queued in this order
        for lo in reversed(range(0, n, block)):
            hi = min(n, lo + block)
            size = block if block_rows else 1 << (hi - lo - 1).bit_length()
            pick = list(range(lo, hi)) + [lo] * (size - (hi - lo))
            tail = np.full((size, chunk), self.pad_id, np.int32)
            for i, k in enumerate(pick):
                got = list(contexts[k])[-chunk:]
                tail[i, chunk - len(got) :] = got
            with self._mesh():
                self.state = engine.extend(
                    self.state,
                    self.params,
                    jnp.asarray([flat[k] for k in pick], jnp.int32),
                    tail,
                    np.asarray([len(contexts[k]) for k in pick], np.int32),
                    jnp.int32(hi - lo),
                    caps[pick],
                    temperature[pick],
                    top_p[pick],
                    top_k[pick],
                    ids[pick],
                    jnp.int32(first + lo),
                    config=self.config,
                    shape=self.full_shape,
                )
            self.extend_columns += size * chunk
        self.pushed += n
        self.extended += n
        at = (first + np.arange(n)) % shape.max_prompts
        self.prompt_ids[at], self.prompt_mask[at] = left_pad(contexts, shape.prompt_width, self.pad_id)
        self.temperature[at * g] = temperature
        self.samples_of[at] = 1
        self.held.difference_update(flat)
        self.reported_rows[at * g] = False  # the positions' new sample runs
        return range(first, first + n)

    def drop(self, rows: Sequence[tuple[int, int]], *, block_rows: int | None = None) -> None:
        """Held rows (prompt index, sample) that end give their pages back (``hold``); block_rows as
        in extend."""
        flat = [(p % self.shape.max_prompts) * self.shape.samples + j for p, j in rows]
        if any(r not in self.held for r in flat):
            raise ValueError("drop of a row that is not held (not finished, or already extended or dropped)")
        block = block_rows or self.max_admit
        for lo in range(0, len(flat), block):
            part = flat[lo : lo + block]
            size = block if block_rows else 1 << (len(part) - 1).bit_length()
            ids = np.asarray(part + [self.shape.rows] * (size - len(part)), np.int32)
            with self._mesh():
                pages, table = engine.drop(self.state["pages"], self.state["row_table"], ids, shape=self.full_shape)
            self.state = dict(self.state, pages=pages, row_table=table)
        self.held.difference_update(flat)

    def _kept(self, rows: Sequence[tuple[int, int]]) -> list[list[int]]:
        """Each row's tokens whose keys its pages hold: its prompt and its answer but the last token."""
        g, m = self.shape.samples, self.shape.max_prompts
        flat = jnp.asarray([(p % m) * g + j for p, j in rows], jnp.int32)
        picked = _take_rows({k: self.state[k] for k in ("tokens", "lengths")}, flat)
        tokens, lengths = (np.asarray(shd.to_host(picked[k])) for k in ("tokens", "lengths"))
        out = []
        for (p, _), row, n in zip(rows, tokens, lengths):
            at = p % m
            prompt = self.prompt_ids[at][self.prompt_mask[at] > 0].tolist()
            out.append(prompt + row[: max(int(n) - 1, 0)].tolist())
        return out

    def run(self, steps: int | None = None) -> list[int]:
        """Decode for at most ``steps`` steps (all that is queued if None); returns the prompt indices
        whose G samples have all finished since the last call."""
        self._check_open()
        budget = NO_LIMIT if steps is None else steps
        while budget > 0:
            before = self._scalar("steps")
            with self._mesh():
                self.state = engine.run(
                    self.state,
                    self.params,
                    self.stop_ids,
                    jnp.int32(self.pad_id),
                    self.rng,
                    jnp.int32(budget),
                    config=self.config,
                    shape=self.shape,
                )
            budget -= self._scalar("steps") - before
            occupied = int((shd.to_host(self.state["slot_seq"]) >= 0).sum())
            target = tail_resize(self.sizes, occupied, self.shape.slots, self._scalar("head") < self._scalar("tail"))
            if target is None:
                break
            self._resize(target)  # the tail: fewer, fuller slots
        if bool(shd.to_host(self.state["pages"].failed)):
            raise RuntimeError("the page pool ran out (engine sizing bug); raise num_pages")
        lengths, stopped, cap = (np.asarray(shd.to_host(self.state[k])) for k in ("lengths", "stopped", "cap"))
        g, m = self.shape.samples, self.shape.max_prompts
        done_rows = np.asarray((lengths > 0) & (stopped | (lengths >= cap)), bool).reshape(-1, g)
        used = np.arange(g)[None, :] < self.samples_of[:, None]  # an extend's prompt has one sample
        finished = np.all(done_rows | ~used, axis=1).tolist()  # per position
        new = [p for p in self.active() if p not in self.reported and bool(finished[p % m])]
        self.reported.update(new)
        if self.shape.hold:  # finished rows now keep their pages until extended or dropped
            rows = np.flatnonzero((done_rows & used).reshape(-1) & ~self.reported_rows)
            self.reported_rows[rows] = True
            self.held.update(rows.tolist())
            self.finished_rows = [(self._prompt_at(r // g), r % g) for r in rows.tolist()]
        return new

    def _prompt_at(self, position: int) -> int:
        """The prompt index living at ``position`` now (the latest pushed there)."""
        m = self.shape.max_prompts
        return self.pushed - 1 - (self.pushed - 1 - position) % m

    def _scalar(self, name: str) -> int:
        return int(shd.to_host(self.state[name]))

    def _resize(self, slots: int):
        with self._mesh(), warnings.catch_warnings():
            # the per-slot arrays change shape, so their donated buffers cannot be reused (the pool's are)
            warnings.filterwarnings("ignore", "Some donated buffers were not usable")
            self.state = engine.resize(self.state, shape=self.shape, slots=slots)
        self.shape = dataclasses.replace(self.shape, slots=slots, shrink_at=shrink_at(self.sizes, slots))

    @property
    def done(self) -> bool:
        """Every prompt pushed has finished."""
        return len(self.reported) == self.pushed

    def output(self, prompts: Sequence[int] | None = None) -> SamplerOutput:
        """Results for these prompt indices (all pushed ones by default), rows prompt-major (G rows
        a pushed prompt, one an extend's)."""
        picks = np.asarray(self.active() if prompts is None else prompts, np.int64)
        return self.output_rows([(int(p), j) for p in picks for j in range(len(self._rows(int(p))))])

    def output_rows(self, rows: Sequence[tuple[int, int]]) -> SamplerOutput:
        """Results for these rows (prompt index, sample), in this order."""
        g, m = self.shape.samples, self.shape.max_prompts
        if any(p in self.retired or not max(0, self.pushed - m) <= p < self.pushed for p, _ in rows):
            raise ValueError("output() of a prompt never pushed or already retired (its position may be reused)")
        if any(not 0 <= j < self.samples_of[p % m] for p, j in rows):
            raise ValueError("output() of a sample the prompt does not have (an extend's prompt has one)")
        flat = np.asarray([(p % m) * g + j for p, j in rows], np.int64)
        keys = ("tokens", "logprobs", "versions", "lengths", "stopped", "entropy")
        # only these rows, padded to a power of two: a few gather programs whatever the counts
        padded = np.zeros(1 << max(len(flat) - 1, 0).bit_length(), np.int32)
        padded[: len(flat)] = flat
        picked = _take_rows({k: self.state[k] for k in keys}, jnp.asarray(padded))
        tokens, logprobs, versions, lengths, stopped, entropy = (shd.to_host(picked[k])[: len(flat)] for k in keys)
        written = np.arange(tokens.shape[1])[None, :] < lengths[:, None]  # a reused row holds old tokens after
        return SamplerOutput(
            tokens=np.where(written, tokens, np.int32(self.pad_id)),
            logprobs=np.where(written, logprobs, np.float32(0)),
            lengths=lengths,
            truncated=~stopped,
            entropy=entropy / np.maximum(lengths, 1),
            temperature=self.temperature[flat],
            prompt_tokens=self.prompt_ids[flat // g],
            prompt_mask=self.prompt_mask[flat // g],
            versions=np.where(written, versions, np.int32(0)),
        )

    def _check_open(self):
        if self.params is None:
            raise RuntimeError("this PagedSession was closed (its weights freed); open a new one to sample more")

    def close(self) -> None:
        """Free the session's decode-layout weights now (the train step gets the memory back); the
        outputs stay readable."""
        if self.params is not None:
            free(self.params, self._stored)
            self.params = None

    def stats(self) -> dict:
        """Decode steps, slot-steps, slot-steps that produced a token, attention key slots read (the
        XLA path: every slot up to the longest; own_reads: a paged kernel's, each slot its own blocks),
        generated tokens, tokens prefilled again after weight updates, the full slot width."""
        keys = ("steps", "slot_steps", "live_steps", "reads", "own_reads", "lengths", "recomputed")
        steps, slot_steps, live, reads, own_reads, lengths, recomputed = (
            int(shd.to_host(self.state[k]).sum()) for k in keys
        )
        return dict(
            steps=steps,
            slot_steps=slot_steps,
            live_slot_steps=live,
            reads=reads,
            own_reads=own_reads,
            generated=lengths,
            recomputed=recomputed,
            slots=self.full_shape.slots,
        )


def generate_paged(
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
    slots: int | None = None,
    page_size: int = 16,
    refill_every: int = 4,
    tail_slots: int | None = None,
    caps=None,
    on_group_done: Callable[[int, SamplerOutput], None] | None = None,
    report_every: int = 256,
    queue_order: Sequence[int] | None = None,
    num_pages: int | None = None,
    stats: dict | None = None,
    kv_dtype: str = "model",
) -> SamplerOutput:
    """`sampler.generate` on the paged engine; see the module doc. Returns all rows, prompt-major.

    ``stats``: a dict to fill with `PagedSession.stats()` (steps, slot-steps, attention reads).
    """
    if not prompts or num_samples < 1 or max_new_tokens < 1:
        raise ValueError("need at least one prompt, num_samples >= 1 and max_new_tokens >= 1")
    width = prompt_bucket(max(len(p) for p in prompts), prompt_buckets)
    session = PagedSession(
        params,
        config,
        num_samples=num_samples,
        max_prompts=len(prompts),
        max_new_tokens=max_new_tokens,
        prompt_width=width,
        stop_token_ids=stop_token_ids,
        pad_id=pad_id,
        rng=rng,
        slots=call_slots(slots, len(prompts) * num_samples),
        page_size=page_size,
        refill_every=refill_every,
        tail_slots=tail_slots,
        num_pages=num_pages,
        kv_dtype=kv_dtype,
        max_admit=max(MAX_ADMIT, len(prompts)) if queue_order is not None else MAX_ADMIT,
        mesh=mesh,
    )
    session.push(prompts, temperature=temperature, top_p=top_p, top_k=top_k, caps=caps, queue_order=queue_order)
    while not session.done:
        for index in session.run(report_every if on_group_done else None):
            if on_group_done is not None:
                on_group_done(index, session.output([index]))
    session.close()
    if stats is not None:
        stats.update(session.stats())
    return session.output()
