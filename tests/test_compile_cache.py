"""The persistent compile cache: a program compiled once is loaded from the directory after the
in-memory caches are cleared (what a restarted process sees); '' turns it off; bad values are
one error line before anything is written."""

import os

import jax
import jax.numpy as jnp
import pytest

from microcoder_jax.trainer import compile_cache, loop

HITS = "/jax/compilation_cache/cache_hits"


@pytest.fixture
def hits():
    count = [0]
    jax.monitoring.register_event_listener(lambda event, **kw: count.__setitem__(0, count[0] + (event == HITS)))
    yield count
    compile_cache.enable("", "")  # later tests in this process compile without a cache


def test_a_restart_loads_the_program_from_the_cache_dir(tmp_path, hits):
    workdir = str(tmp_path / "run")
    path = compile_cache.enable("{workdir}/compile_cache", workdir)
    assert path == os.path.join(workdir, "compile_cache")
    f = lambda x: jnp.sin(x) @ x.T + 1.0  # noqa: E731
    x = jnp.ones((8, 8))
    expected = jax.jit(f)(x)
    assert os.listdir(path), "the compiled program was not written"
    jax.clear_caches()  # a new process: nothing compiled in memory
    before = hits[0]
    assert (jax.jit(f)(x) == expected).all() and hits[0] == before + 1
    assert compile_cache.enable("", workdir) is None and jax.config.jax_compilation_cache_dir is None
    jax.clear_caches()
    jax.jit(f)(x)
    assert hits[0] == before + 1  # off: compiled, not loaded


def test_shared_path_and_placeholder(tmp_path):
    assert compile_cache.resolve("", "/w") is None
    assert compile_cache.resolve("{workdir}/cc", "/w") == "/w/cc"
    assert compile_cache.resolve(str(tmp_path / "shared"), "/w") == str(tmp_path / "shared")
    assert compile_cache.template_error("{workdir}/cc") is None and compile_cache.template_error("/a/{x}")


@pytest.mark.parametrize(
    "value, message",
    [
        ("{run}/cache", "train.compile_cache='{run}/cache': the only placeholder is {workdir}"),
        ("file", "exists and is not a directory"),
    ],
)
def test_bad_value_is_one_error_line_and_nothing_is_written(tmp_path, capsys, value, message):
    (tmp_path / "file").write_text("not a directory")
    workdir = tmp_path / "run"
    value = str(tmp_path / value) if value == "file" else value
    assert loop.main([f"--config.train.compile_cache={value}", f"--workdir={workdir}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not workdir.exists()


def test_help_lists_the_key(capsys):
    with pytest.raises(SystemExit):
        loop.main(["--help"])
    out = capsys.readouterr().out
    assert "--config.train.compile_cache='{workdir}/compile_cache'  JAX persistent compilation cache" in out
