"""Under CI=true on Linux x86_64 a skipped TPU-compile, planner or kernel test fails the run
(conftest.py); elsewhere, or for other tests, a skip stays a skip."""

import os
import platform
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIPS = "import pytest\n\ndef test_skips():\n    pytest.skip('libtpu cannot make AOT devices here')\n"


def _pytest(tmp_path, files: dict, ci: str):
    for helper in ("conftest.py", "xdist_crashes.py"):  # conftest imports the xdist hooks
        shutil.copy(os.path.join(HERE, helper), tmp_path / helper)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )


def test_unexpected_skips_fail_under_ci(tmp_path):
    strict = sys.platform.startswith("linux") and platform.machine() == "x86_64"
    module = {"test_tpu_compile.py": "import pytest\npytest.skip('libtpu is not installed', allow_module_level=True)\n"}
    tests = {
        "test_plan.py": SKIPS,
        "test_paged_kernel.py": SKIPS,
        "test_kv_quant.py": SKIPS,
        "test_plan_lengths.py": SKIPS,
        "test_other.py": SKIPS,
    }
    for files in (module, tests):
        for name in os.listdir(tmp_path):
            os.remove(tmp_path / name) if name.endswith(".py") else None
        ci = _pytest(tmp_path, files, "true")
        if strict:
            assert ci.returncode != 0, ci.stdout
            for name in set(files) - {"test_other.py"}:
                assert f"{name} skipped under CI=true" in ci.stdout, ci.stdout
            assert "test_other.py skipped" not in ci.stdout
        else:
            assert ci.returncode in (0, 5), ci.stdout  # 5: the module skipped, nothing collected
        local = _pytest(tmp_path, files, "")  # a developer's machine without libtpu: skips are skips
        assert local.returncode in (0, 5) and "skipped" in local.stdout and "failed" not in local.stdout, local.stdout
