"""Hostile programs: the judge keeps running, gives the right verdict, and the machine is unchanged."""

import os
import shutil
import socket
import sys
import threading
import uuid

import pytest

from microcoder_jax.judge import JudgePool, Problem, TestCase

SUM = Problem("sum", [TestCase("1 2\n3\n", "6\n"), TestCase("4 1\n1\n", "6\n")])
LINUX = sys.platform.startswith("linux")


@pytest.fixture(scope="module")
def pool():
    os.environ["MCJ_TEST_SECRET"] = "hunter2"  # must not reach any program
    try:
        with JudgePool(
            workers=2, timeout=1.0, memory_mb=256, output_limit_mb=1, wall_factor=2.0, max_processes=32
        ) as p:
            yield p
    finally:
        del os.environ["MCJ_TEST_SECRET"]


def _processes_of(uids) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            found.append(int(pid))
    return found


def needs(pool, *keys):
    missing = [k for k in keys if not pool.isolation.get(k)]
    if missing:
        pytest.skip(f"this OS or user does not allow: {missing}")


def test_isolation_report(pool):
    iso = pool.isolation
    assert {
        "pid_ns",
        "net_ns",
        "mount_ns",
        "ipc_ns",
        "minimal_root",
        "readonly_root",
        "private_tmp",
        "private_proc",
        "uid",
        "cgroup",
        "cgroup_controllers",
        "keyring",
    } <= set(iso)
    if LINUX and os.geteuid() == 0:  # what this project's Linux CI grants: everything
        assert iso["uid"] is not None and iso["pid_ns"] and iso["net_ns"] and iso["mount_ns"]
        assert iso["ipc_ns"] and iso["minimal_root"] and iso["private_proc"] and iso["keyring"]


def test_killing_the_parent_or_everyone_kills_only_the_program(pool):
    if not (pool.isolation["pid_ns"] or pool.isolation["uid"] is not None):
        pytest.skip("program and server share uid and PID namespace: nothing stops the kill")
    servers = pool.server_pids
    slow_ok = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\nprint(6)"
    codes = [
        "import os\ntry:\n    os.kill(os.getppid(), 9)\nexcept OSError:\n    pass\nprint(6)",
        "import os\ntry:\n    os.killpg(1, 9)\nexcept OSError:\n    pass\nprint(6)",
        "import os\nos.killpg(0, 9)\nprint(6)",
        "import os\nos.kill(-1, 9)\nprint(6)",
        slow_ok,  # runs on the other server while the others kill what they can
    ]
    results = pool.judge([SUM] * len(codes), codes)
    assert [r.verdict for r in results] == ["passed", "passed", "runtime_error", "runtime_error", "passed"]
    assert "SIGKILL" in results[2].reason
    assert pool.server_pids == servers  # no fork server died or was restarted
    assert pool.judge([SUM], ["print(6)"])[0].passed


def test_fork_bombs_and_escaped_daemons_leave_no_process(pool):
    needs(pool, "uid")
    codes = [
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        (
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        while True:\n            time.sleep(0.01)\n    os._exit(0)\nprint(6)"
        ),
        "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nprint(6)",
    ]
    results = pool.judge([SUM] * len(codes), codes)
    assert [r.verdict for r in results] == ["timeout", "passed", "passed"]
    assert _processes_of(set(pool.sandbox_uids)) == []


def test_files_outside_the_work_directory_are_untouched(pool, tmp_path):
    needs(pool, "uid", "readonly_root", "private_tmp")
    canary = tmp_path / "canary"
    canary.write_text("alive")
    tag = uuid.uuid4().hex
    targets = [f"/tmp/mcj-evil-{tag}", f"/var/tmp/mcj-evil-{tag}", f"/dev/shm/mcj-evil-{tag}", str(tmp_path / "evil")]
    attack = (
        "import os, shutil\n"
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('x')\n    except OSError:\n        pass\n"
        f"for f in (os.remove, os.unlink):\n    try:\n        f({str(canary)!r})\n    except OSError:\n        pass\n"
        f"shutil.rmtree({str(tmp_path)!r}, ignore_errors=True)\n"
        "open('junk', 'w').write('left behind')\nprint(6)"
    )
    look = (
        "import os\nclean = os.listdir('.') == [] and not any(\n"
        "    n.startswith('mcj-evil') for d in ('/tmp', '/dev/shm') for n in os.listdir(d))\n"
        "print(6 if clean else 0)"
    )
    results = pool.judge([SUM, SUM], [attack, look])
    assert [r.verdict for r in results] == ["passed", "passed"]
    assert canary.read_text() == "alive"
    assert not any(os.path.exists(t) for t in targets)


def test_environment_is_scrubbed(pool):
    code = (
        "import os\nok = not any('SECRET' in k or 'hunter2' in v for k, v in os.environ.items())\n"
        "print(6 if ok and os.environ['HOME'] == os.getcwd() else 0)"
    )
    assert pool.judge([SUM], [code])[0].passed


def test_no_network(pool):
    needs(pool, "net_ns")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    threading.Thread(target=lambda: server.accept(), daemon=True).start()
    code = (
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n    print(0)\n"
        "except OSError:\n    print(6)"
    )
    try:
        assert pool.judge([SUM], [code])[0].passed
    finally:
        server.close()


def test_judge_memory_and_expected_outputs_are_out_of_reach(pool):
    needs(pool, "uid")
    secret = f"SECRET-{uuid.uuid4().hex}"
    problem = Problem("secret", [TestCase("1\n", secret + "\n")])
    hunt = (
        "import gc, re, sys\nfound = set()\npattern = re.compile(rb'SECRET-[0-9a-f]{32}')\n"
        "for obj in gc.get_objects():\n"
        "    for v in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):\n"
        "        if isinstance(v, str) and pattern.search(v.encode()):\n            found.add(v)\n"
        "f = sys._getframe()\nwhile f:\n"
        "    found.update(v for v in f.f_locals.values() if isinstance(v, str) and 'SECRET-' in v)\n"
        "    f = f.f_back\n"
        "try:  # a sandbox uid may not even read its own /proc/self/mem\n"
        "    maps, mem = open('/proc/self/maps'), open('/proc/self/mem', 'rb')\n"
        "except OSError:\n    maps = []\n"
        "for line in maps:\n"
        "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    if 'r' not in line.split()[1] or hi - lo > 1 << 26:\n        continue\n"
        "    try:\n        mem.seek(lo)\n        chunk = mem.read(hi - lo)\n    except OSError:\n"
        "        continue\n"
        "    found.update(m.decode() for m in pattern.findall(chunk))\n"
        "print(sorted(found)[0] if found else 'none')"
    )
    judge_pid = os.getpid()
    peek = (
        "import os\ndenied = 0\n"
        f"for name in ('mem', 'environ', 'cmdline'):\n"
        f"    try:\n        open('/proc/{judge_pid}/' + name, 'rb').read(1)\n"
        "    except OSError:\n        denied += 1\nprint(6 if denied == 3 else 0)"
    )
    hunted, peeked = pool.judge([problem, SUM], [hunt, peek])
    assert hunted.verdict == "wrong_answer" and "'none'" in hunted.reason
    assert peeked.passed


def test_without_namespaces_leftovers_are_still_killed_by_uid():
    """What hosts refusing namespaces (e.g. Docker's default seccomp) get, as root."""
    with JudgePool(
        workers=1, timeout=1.0, memory_mb=256, output_limit_mb=1, wall_factor=2.0, max_processes=32, namespaces=False
    ) as pool:
        assert not pool.isolation["pid_ns"] and not pool.isolation["mount_ns"]
        needs(pool, "uid")
        codes = [
            "import os\ntry:\n    os.kill(os.getppid(), 9)\nexcept OSError:\n    pass\nprint(6)",
            "import os\nos.killpg(0, 9)\nprint(6)",
            (
                "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                "        while True:\n            time.sleep(0.01)\n    os._exit(0)\nprint(6)"
            ),
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            "print(sum(map(int, open(0).read().split())))",
        ]
        servers = pool.server_pids
        results = pool.judge([SUM] * len(codes), codes)
        assert [r.verdict for r in results] == ["passed", "runtime_error", "passed", "timeout", "passed"]
        assert pool.server_pids == servers
        assert _processes_of(set(pool.sandbox_uids)) == []


def test_deep_and_unreadable_leftovers_do_not_break_the_server(pool):
    needs(pool, "private_tmp")
    litter = (
        "import os\nfor i in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
        "open('f', 'w').write('x')\nos.chdir('/tmp')\nos.makedirs('/tmp/x/y')\n"
        "os.chmod('/tmp/x/y', 0)\nos.chmod('/tmp/x', 0)\nprint(6)"
    )
    look = "import os\nprint(6 if os.listdir('.') == [] and not os.path.exists('/tmp/x') else 0)"
    results = pool.judge([SUM], [litter]) + pool.judge([SUM] * 4, [look] * 4)
    assert [r.verdict for r in results] == ["passed"] * 5


def test_hidden_paths_cannot_be_read():
    """Problem files hold the expected outputs: a pool can hide them (the CLI hides its input)."""
    shared = f"/var/tmp/mcj-test-{uuid.uuid4().hex}"  # outside /tmp, which programs never see
    os.makedirs(f"{shared}/data")
    try:
        for path in (f"{shared}/problems.jsonl", f"{shared}/data/tests.json"):
            with open(path, "w") as f:
                f.write("SECRET")
        os.chmod(shared, 0o755)
        os.chmod(f"{shared}/data", 0o755)
        read = (
            f"import os\nseen = ''\nfor p in ({shared + '/problems.jsonl'!r}, {shared + '/data/tests.json'!r}):\n"
            "    try:\n        seen += open(p).read()\n    except OSError:\n        pass\n"
            "print(6 if 'SECRET' not in seen else 0)"
        )
        with JudgePool(
            workers=1, timeout=1.0, memory_mb=256, hide=[f"{shared}/problems.jsonl", f"{shared}/data"]
        ) as pool:
            needs(pool, "mount_ns")
            assert pool.isolation["hidden"] == 2
            assert pool.judge([SUM], [read])[0].passed
        # The control: without namespaces, the same program does read the files.
        with JudgePool(workers=1, timeout=1.0, memory_mb=256, namespaces=False) as open_pool:
            assert open_pool.judge([SUM], [read])[0].verdict == "wrong_answer"
        assert open(f"{shared}/problems.jsonl").read() == "SECRET"  # untouched on the host
    finally:
        shutil.rmtree(shared)
