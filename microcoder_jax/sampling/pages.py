"""The page allocator, on device: reference counts and a free-list stack over a fixed pool.

A page is free when its count is 0. ``allocate`` pops pages off the stack (in a fixed, data-only
order) and gives each the requested count; ``release`` drops one reference per listed id and
pushes the pages that reach 0 back. Ids equal to ``num_pages`` mean "no page" and are ignored, so
the callers can pass fixed-shape arrays with unused entries. Everything is traced: jit-safe.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class Pages(NamedTuple):
    refs: jax.Array  # [num_pages] int32 references to each page
    free: jax.Array  # [num_pages] int32 stack of free ids; free[:count] is valid, top at count - 1
    count: jax.Array  # scalar int32: free pages
    failed: jax.Array  # scalar bool: an allocation asked for more pages than were free (a sizing bug)


def init_pages(num_pages: int) -> Pages:
    return Pages(
        jnp.zeros((num_pages,), jnp.int32),
        jnp.arange(num_pages, dtype=jnp.int32)[::-1],
        jnp.int32(num_pages),
        jnp.bool_(False),
    )


def allocate(pages: Pages, need: jax.Array, refs=1) -> tuple[Pages, jax.Array]:
    """One page for every true entry of ``need [R]`` -> (pages, ids [R]; ``num_pages`` where not needed)."""
    num_pages = pages.refs.shape[0]
    rank = jnp.cumsum(need.astype(jnp.int32)) - 1
    total = jnp.sum(need.astype(jnp.int32))
    ok = total <= pages.count
    slot = jnp.clip(pages.count - 1 - rank, 0, num_pages - 1)
    ids = jnp.where(need & ok, pages.free[slot], num_pages)
    refs_now = pages.refs.at[ids].set(jnp.broadcast_to(jnp.asarray(refs, jnp.int32), ids.shape), mode="drop")
    return Pages(refs_now, pages.free, pages.count - jnp.where(ok, total, 0), pages.failed | ~ok), ids


def release(pages: Pages, ids: jax.Array) -> Pages:
    """Drop one reference per entry of ``ids`` (any shape); pages reaching 0 go back on the stack."""
    num_pages = pages.refs.shape[0]
    refs = pages.refs.at[ids.reshape(-1)].add(-1, mode="drop")
    freed = (pages.refs > 0) & (refs <= 0)
    where = jnp.where(freed, pages.count + jnp.cumsum(freed.astype(jnp.int32)) - 1, num_pages)
    free = pages.free.at[where].set(jnp.arange(num_pages, dtype=jnp.int32), mode="drop")
    return Pages(jnp.maximum(refs, 0), free, pages.count + jnp.sum(freed.astype(jnp.int32)), pages.failed)


def check_invariants(pages: Pages, expected_refs: np.ndarray) -> None:
    """Host check: counts equal ``expected_refs`` (references held by slots and queued samples), the
    free stack holds exactly the unreferenced pages, each once. Raises AssertionError naming the page."""
    refs, free, count = (np.asarray(jax.device_get(x)) for x in pages[:3])
    if bool(jax.device_get(pages.failed)):
        raise AssertionError("an allocation ran out of pages")
    wrong = np.flatnonzero(refs != expected_refs)
    if wrong.size:
        raise AssertionError(f"page {wrong[0]}: {refs[wrong[0]]} references counted, {expected_refs[wrong[0]]} held")
    stack = free[: int(count)]
    if len(set(stack.tolist())) != len(stack):
        raise AssertionError("a page is on the free stack twice")
    if set(stack.tolist()) != set(np.flatnonzero(expected_refs == 0).tolist()):
        raise AssertionError("the free stack is not exactly the unreferenced pages")
