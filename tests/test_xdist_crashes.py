"""The suite's xdist scheduler (tests/xdist_crashes.py): a worker lost to a native crash costs one
rerun of its test, a test that crashes every time fails the run, and neither hangs (the stock
`loadfile` scheduler of pytest-xdist 3.8.0 deadlocked on both)."""

import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))

# Eight files of plain tests, then one whose middle test aborts the interpreter (as XLA's compiler
# did): once (flag file absent, then created) or on every run. It is scheduled last, so the queue is
# empty when the worker dies and the replacement is handed the file's last test alone.
CRASHER = """
import os, time
FLAG = {flag!r}
def test_before():
    time.sleep(1.0)
def test_crashes():
    if {always} or not os.path.exists(FLAG):
        open(FLAG, "a").close()
        os.abort()
def test_after():
    pass
"""


def _run(tmp_path, always: bool):
    for name in "abcdefgh":  # the stock scheduler hung on these when the crash repeats
        (tmp_path / f"test_{name}.py").write_text(
            f"import time\ndef test_{name}1():\n    time.sleep(0.3)\ndef test_{name}2():\n    pass\n"
        )
    flag = tmp_path / "crashed"
    (tmp_path / "test_z.py").write_text(textwrap.dedent(CRASHER.format(flag=str(flag), always=always)))
    env = dict(os.environ, PYTHONPATH=TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p", "xdist_crashes"]
    cmd += ["-p", "no:cacheprovider", "-p", "no:faulthandler", "-q", str(tmp_path)]
    # A deadlock would run into the timeout (the bare file set takes a few seconds)
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    return out.returncode, out.stdout + out.stderr


def test_a_test_that_crashes_once_is_rerun_and_the_run_passes(tmp_path):
    code, out = _run(tmp_path, always=False)
    assert code == 0, out
    assert "19 passed, 1 rerun" in out, out
    assert "RERUN test_z.py::test_crashes: worker 'gw" in out, out


def test_a_test_that_crashes_every_time_fails_once_and_the_rest_still_runs(tmp_path):
    code, out = _run(tmp_path, always=True)
    assert code == 1, out
    # test_crashes: one rerun, then one failure; test_after still runs on the third worker
    assert "1 failed, 18 passed, 1 rerun" in out, out
    assert "FAILED test_z.py::test_crashes" in out, out
