"""A process that compiles for hours must not run into Linux's cap on its memory mappings.

Linux allows one process `vm.max_map_count` mappings (65,530 by default). XLA's CPU backend maps
about three for every kernel it compiles (code, constants, data), and JAX keeps every program it
compiled for as long as the jitted function lives: module-level functions, for ever. A process
that compiles many shapes (the test suite's workers, an experiment training arm after arm) climbs
towards the cap, and the compile that crosses it dies in native code (SIGSEGV or SIGABRT inside
`backend_compile_and_load`). `relieve` drops JAX's compiled programs once the process holds a
share of the cap; the next call of each function compiles again.
"""

from __future__ import annotations

import gc

SHARE = 1 / 3  # relieve above a third of the cap: the next run or test file has two thirds left


def map_limit() -> int:
    """The kernel's cap on one process's mappings; 0 where there is none to read (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 0


def mappings() -> int:
    """How many memory mappings this process holds now (0 where /proc is not there)."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def relieve(share: float = SHARE) -> bool:
    """Drop every compiled program (jax.clear_caches) if this process holds at least `share` of the
    cap; returns whether it did."""
    limit = map_limit()
    if not limit or mappings() < share * limit:
        return False
    import jax

    jax.clear_caches()
    gc.collect()
    return True
