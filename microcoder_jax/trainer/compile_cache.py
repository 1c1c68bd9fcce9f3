"""JAX's persistent compilation cache for a run, so a restart (preemption, resume) loads compiled
programs from disk instead of compiling them again.

`train.compile_cache` names the directory: `{workdir}` stands for the run's workdir (the default,
`{workdir}/compile_cache`), '' turns the cache off. On several hosts JAX writes entries from
process 0 only and every process reads, so the directory must be one every host reads (the
workdir on a shared disk, or a shared path); runs of the same shapes can share one too (the
cache is trusted code: share it only with people you trust). Programs with host callbacks are
never cached (JAX's rule). `enable` sets it before the first compile; a process that trains
twice (tests) switches directory cleanly.
"""

from __future__ import annotations

import os

import jax

from microcoder_jax.blocks import ConfigError

WORKDIR = "{workdir}"
# JAX's default (1 s) leaves out the small programs; every compile of the demo counts at its scale,
# and reading a small entry back costs less than compiling it.
MIN_COMPILE_SECONDS = 0.0


def template_error(template: str) -> str | None:
    """Why `template` is not a valid train.compile_cache value (None when it is)."""
    rest = template.replace(WORKDIR, "")
    if "{" in rest or "}" in rest:
        return f"the only placeholder is {WORKDIR} (the run's workdir); use a plain path or ''"
    return None


def resolve(template: str, workdir: str) -> str | None:
    """The cache directory for this workdir (absolute), or None when the cache is off."""
    if not template:
        return None
    return os.path.abspath(os.path.expanduser(template.replace(WORKDIR, workdir)))


def enable(template: str, workdir: str) -> str | None:
    """Point JAX's persistent cache at `template` resolved for `workdir` (or turn it off); returns
    the directory. Raises ConfigError (nothing written) when the path is a file."""
    from jax.experimental.compilation_cache import compilation_cache

    path = resolve(template, workdir)
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"train.compile_cache={template!r}: {path} exists and is not a directory")
    if jax.config.jax_compilation_cache_dir != path:  # pyright: ignore[reportAttributeAccessIssue]
        compilation_cache.reset_cache()  # JAX opens its cache once per directory
        jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path
