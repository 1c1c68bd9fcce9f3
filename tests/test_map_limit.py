"""trainer/map_limit.py: compiled programs hold memory mappings, and relieving drops them."""

import sys

import jax
import jax.numpy as jnp
import pytest

from microcoder_jax.trainer import map_limit

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


def test_compiled_programs_hold_mappings_until_relieved():
    assert map_limit.map_limit() > 0
    jax.clear_caches()
    start = map_limit.mappings()

    @jax.jit
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, y: jnp.sin(y) @ y.T + i, x)

    for n in range(2, 22):  # 20 programs
        f(jnp.ones((n, n))).block_until_ready()
    grown = map_limit.mappings()
    assert grown - start >= 20, (start, grown)  # at least one mapping a program
    assert not map_limit.relieve(share=1.0)  # far below the cap: nothing dropped
    assert map_limit.mappings() >= grown - 5
    assert map_limit.relieve(share=0.0)
    # most go (the allocator keeps a few regions it grew into)
    assert map_limit.mappings() - start <= (grown - start) // 2, (start, grown, map_limit.mappings())
