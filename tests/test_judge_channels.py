"""One hostile program per channel a judged program could use to reach other tests, the judge or
the host: each tries it, fails, and leaves nothing behind (kernel objects, files, sockets,
processes). Where this kernel or user is refused the isolation a channel needs, the test is
skipped with the reason."""

import ctypes
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest

from microcoder_jax.judge import cli as evaluate
from microcoder_jax.judge import JudgePool, Problem, TestCase

SIX = Problem("six", [TestCase("1\n", "6\n"), TestCase("2\n", "6\n")])
LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="these channels are closed by Linux namespaces and cgroups")


@pytest.fixture(scope="module")
def pool():
    # One server: every program below is forked from the same process, one after another.
    with JudgePool(workers=1, timeout=1.0, memory_mb=256, output_limit_mb=1, wall_factor=6.0, max_processes=64) as p:
        yield p


def needs(pool, *keys):
    missing = [k for k in keys if not pool.isolation.get(k)]
    if missing:
        pytest.skip(f"this kernel or user does not allow: {missing}")


def _sysv_keys() -> set:
    keys = set()
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            keys |= {int(line.split()[0]) for line in list(f)[1:]}
    return keys


def test_sysv_and_posix_ipc_objects_die_with_the_test(pool):
    needs(pool, "ipc_ns")
    key = 0x4D000000 + int(uuid.uuid4().hex[:5], 16)
    name = f"/mcj-{uuid.uuid4().hex[:12]}".encode()
    # Creates (exclusively) a shared memory segment, a message queue, a semaphore set and a POSIX
    # queue, under names fixed in advance: any of them already there means an earlier test's leaked.
    hostile = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"KEY, NAME = {key}, {name!r}\nCREATE_EXCL = 0o1000 | 0o2000 | 0o666\n"
        "leaked = 0\n"
        "for make in (lambda: libc.shmget(KEY, 1 << 20, CREATE_EXCL), lambda: libc.msgget(KEY, CREATE_EXCL),\n"
        "             lambda: libc.semget(KEY, 1, CREATE_EXCL),\n"
        "             lambda: libc.mq_open(NAME, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o666, None)):\n"
        "    if make() < 0 and ctypes.get_errno() == 17:\n        leaked += 1\n"
        "print(6 if leaked == 0 else leaked)"
    )
    results = pool.judge([SIX, SIX], [hostile, hostile])
    assert [r.verdict for r in results] == ["passed", "passed"], results
    assert key not in _sysv_keys()  # nothing on the host
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mq_open(name, os.O_RDONLY) < 0 and ctypes.get_errno() == 2


_KEY_SYSCALLS = {"x86_64": (248, 250), "aarch64": (217, 219)}.get(os.uname().machine)


def _key_users() -> set:
    with open("/proc/key-users") as f:
        return {int(line.split(":")[0]) for line in f}


def test_keyrings_are_fresh_per_program_and_emptied_after(pool):
    needs(pool, "keyring")
    if _KEY_SYSCALLS is None:
        pytest.skip(f"no add_key syscall number known for {os.uname().machine}")
    add_key, keyctl = _KEY_SYSCALLS
    tag = uuid.uuid4().hex[:12]
    # Looks for a key an earlier program left in the session, user or user-session keyring, and
    # leaves one in each for the next.
    hostile = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nL = ctypes.c_long\n"
        f"desc = b'mcj-{tag}'\nfound = 0\n"
        "for ring in (-3, -4, -5):\n"
        f"    if libc.syscall(L({keyctl}), L(10), L(ring), b'user', desc, L(0)) > 0:\n"
        "        found += 1\n"
        "for ring in (-3, -4, -5):\n"
        f"    libc.syscall(L({add_key}), b'user', desc, b'payload', L(7), L(ring))\n"
        "print(6 if found == 0 else found)"
    )
    before = _key_users()
    results = pool.judge([SIX, SIX], [hostile, hostile])
    assert [r.verdict for r in results] == ["passed", "passed"], results
    uids = set(pool.sandbox_uids)
    for _ in range(100):  # the kernel collects discarded keys shortly after
        if not (_key_users() - before) & uids:
            break
        time.sleep(0.02)
    assert not (_key_users() - before) & uids


def test_no_earlier_input_expected_output_or_output_in_the_program_memory(pool):
    tag = uuid.uuid4().hex
    earlier = Problem("earlier", [TestCase(f"IN-{tag}\n", f"OUT-{tag}\n")])
    printer = f"input()\nprint('PRINTED-{tag}')"
    # Every readable byte of its own address space (made dumpable again, so /proc/self/mem opens),
    # every object the collector knows and every frame: what came before must be in none of them.
    hunt = (
        "import ctypes, gc, re, sys\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"
        f"pattern = re.compile(rb'(?:IN|OUT|PRINTED)-{tag}')\nfound = set()\n"
        "for obj in gc.get_objects():\n"
        "    for v in (obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()):\n"
        "        if isinstance(v, (str, bytes)) and pattern.search(v if isinstance(v, bytes) else v.encode()):\n"
        "            found.add('object')\n"
        "f = sys._getframe()\nwhile f:\n"
        "    if any(isinstance(v, str) and pattern.search(v.encode()) for v in f.f_locals.values()):\n"
        "        found.add('frame')\n    f = f.f_back\n"
        "mem = open('/proc/self/mem', 'rb')\nscanned = 0\n"
        "for line in open('/proc/self/maps'):\n"
        "    lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "    if 'r' not in line.split()[1] or hi - lo > 1 << 28:\n        continue\n"
        "    try:\n        mem.seek(lo)\n        chunk = mem.read(hi - lo)\n    except OSError:\n        continue\n"
        "    scanned += len(chunk)\n"
        "    found.update(m.decode() for m in pattern.findall(chunk))\n"
        "print(6 if scanned > 1 << 20 and not found else sorted(found))"
    )  # (its own source holds the tag only after "|PRINTED)-", which the pattern does not match)
    first, second = pool.judge([earlier, SIX], [printer, hunt])
    assert first.verdict == "wrong_answer"  # it printed PRINTED-..., which the judge read
    assert second.passed, second.reason


def test_no_judge_file_path_or_result_is_visible(tmp_path):
    """Through the CLI, whose results file sits next to the problem file."""
    problems, solutions, out = tmp_path / "p.jsonl", tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    problems.write_text(__import__("json").dumps(SIX.to_json()) + "\n")
    allowed = {"usr", "lib", "lib64", "lib32", "libx32", "bin", "sbin", "etc", "tmp", "dev", "proc"}
    allowed |= {p.split("/")[1] for p in (sys.prefix, sys.base_prefix, *sys.path[1:]) if p.startswith("/")}
    # the judge's own source; its checkout's folder itself may exist as a mount point's parent
    # where the interpreter (a venv inside the checkout, as in CI) is mounted
    judge_source = os.path.dirname(evaluate.__file__)
    hostile = (
        "import os\nseen = []\n"
        f"for path in ({str(problems)!r}, {str(out)!r}, {str(tmp_path)!r}, {judge_source!r}):\n"
        "    if os.path.exists(path):\n        seen.append(path)\n"
        f"if {str(tmp_path)!r} in open('/proc/1/cmdline').read() + open('/proc/self/mountinfo').read():\n"
        "    seen.append('cmdline or mountinfo')\n"
        f"seen += sorted(set(os.listdir('/')) - {allowed!r})\n"
        "print(6 if not seen else seen)"
    )
    solutions.write_text(
        "\n".join(__import__("json").dumps({"question_id": "six", "code": c}) for c in (hostile, hostile)) + "\n"
    )
    with JudgePool(workers=1) as probe:
        if not probe.isolation["minimal_root"]:
            pytest.skip("no minimal root here (mount namespaces or pivot_root refused)")
    assert (
        evaluate.main(
            [
                "--problems",
                str(problems),
                "--solutions",
                str(solutions),
                "--out",
                str(out),
                "--workers",
                "1",
                "--timeout",
                "1",
            ]
        )
        == 0
    )
    rows = [__import__("json").loads(line) for line in out.read_text().splitlines()]
    assert [r["verdict"] for r in rows] == ["passed", "passed"], [r["reason"] for r in rows]


def test_the_fork_server_cannot_be_traced_or_read(pool):
    needs(pool, "pid_ns")
    # PID 1 is the fork server: same uid as the program when the judge is not root.
    hostile = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ngot = []\n"
        "if libc.ptrace(16, 1, None, None) == 0:\n    got.append('ptrace')\n"  # PTRACE_ATTACH
        "for name in ('mem', 'environ', 'maps'):\n"
        "    try:\n        open(f'/proc/1/{name}', 'rb').read(1)\n        got.append(name)\n"
        "    except OSError:\n        pass\n"
        "print(6 if not got else got)"
    )
    assert pool.judge([SIX], [hostile])[0].passed


def test_host_unix_sockets_cannot_be_reached(pool, tmp_path):
    needs(pool, "minimal_root", "net_ns")
    path = f"/var/tmp/mcj-{uuid.uuid4().hex[:12]}.sock"
    abstract = f"\0mcj-{uuid.uuid4().hex[:12]}"
    servers = []
    for address in (path, str(tmp_path / "s.sock"), abstract):
        s = socket.socket(socket.AF_UNIX)
        s.bind(address)
        s.listen()
        servers.append(s)
    hostile = (
        "import socket\nreached = 0\n"
        f"for address in ({path!r}, {str(tmp_path / 's.sock')!r}, {abstract!r}):\n"
        "    try:\n        socket.socket(socket.AF_UNIX).connect(address)\n        reached += 1\n"
        "    except OSError:\n        pass\n"
        "print(6 if reached == 0 else reached)"
    )
    try:
        assert pool.judge([SIX], [hostile])[0].passed
    finally:
        for s in servers:
            s.close()
        os.unlink(path)


def test_no_scratch_survives_a_test(pool):
    needs(pool, "private_tmp")
    tag = uuid.uuid4().hex[:12]
    # Writes a file into every directory it can write to, anywhere; the next program looks for them.
    places = (
        "import os\ndef places():\n    yield '/'\n    yield from (os.path.join('/', d) for d in os.listdir('/'))\n"
        "    for top in ('/tmp', '/dev/shm', os.getcwd()):\n"
        "        for here, dirs, files in os.walk(top):\n            yield here\n"
    )
    litter = places + (
        f"for here in places():\n    try:\n        open(os.path.join(here, '.mcj-{tag}'), 'w').write('x')\n"
        "    except OSError:\n        pass\n"
        "print(6)"
    )
    look = places + (
        f"found = [here for here in places() if os.path.exists(os.path.join(here, '.mcj-{tag}'))]\n"
        "print(6 if not found else found[:3])"
    )
    results = pool.judge([SIX, SIX], [litter, look])
    assert [r.verdict for r in results] == ["passed", "passed"], results
    for top in ("/", "/tmp", "/var/tmp", "/dev/shm", os.path.expanduser("~")):  # nor on the host
        assert not os.path.exists(os.path.join(top, f".mcj-{tag}"))


def test_cpu_of_children_nobody_waits_for_counts(pool):
    # Three children spin, never waited for; the parent sleeps, then answers correctly.
    hostile = (
        "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\n"
        "time.sleep(4)\nprint(6)"
    )
    tight = Problem("tight", [TestCase("", "6\n")], metadata={"timeout": 0.3})
    (result,) = pool.judge([tight], [hostile])
    assert result.verdict == "timeout" and "CPU" in result.reason, result
    assert result.cpu_time > 0.3
    uids = set(pool.sandbox_uids)
    for pid in filter(str.isdigit, os.listdir("/proc")):  # and none of them is left running
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        assert uid not in uids


def test_a_program_just_under_the_cpu_limit_passes(pool):
    # The kernel's RLIMIT_CPU is only a backstop, above the limit; the verdict is measured.
    code = (
        "import math, resource, time\nsoft = resource.getrlimit(resource.RLIMIT_CPU)[0]\n"
        "t = time.process_time()\nwhile time.process_time() - t < 0.25:\n    pass\n"
        "print(6 if soft > math.ceil(0.3) else 0)"
    )
    (result,) = pool.judge([Problem("one", [TestCase("", "6\n")], metadata={"timeout": 0.3})], [code])
    assert result.passed, result


def test_memory_limit_is_resident_memory_not_address_space(pool):
    needs(pool, "cgroup")
    if "memory" not in pool.isolation["cgroup_controllers"]:
        pytest.skip("no memory controller")
    threads = (
        "import _thread, time\nlock, done = _thread.allocate_lock(), []\n"  # 40 x 8 MiB stacks
        "def work():\n    time.sleep(0.2)\n    with lock:\n        done.append(1)\n"
        "for _ in range(40):\n    _thread.start_new_thread(work, ())\n"
        "while len(done) < 40:\n    time.sleep(0.01)\nprint(6)"
    )
    hog = "x = bytearray(400 << 20)\nprint(6)"  # really touched: over 256 MiB resident
    # SysV segments, each attached, filled and detached: 512 MiB that no address space ever holds.
    shm = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
        "for _ in range(4):\n    seg = libc.shmget(0, 128 << 20, 0o1000 | 0o600)\n"
        "    addr = libc.shmat(seg, None, 0)\n    ctypes.memset(addr, 1, 128 << 20)\n"
        "    libc.shmdt(ctypes.c_void_p(addr))\nprint(6)"
    )
    # Its own pool with 10 CPU seconds: a cgroup at its memory limit reclaims before it kills, and on
    # a loaded machine that took the hog past the fixture's 1 s (a 'timeout' verdict, not the memory one).
    with JudgePool(workers=1, timeout=10.0, memory_mb=256, output_limit_mb=1, max_processes=64) as roomy:
        results = roomy.judge([SIX] * 3, [threads, hog, shm])
    assert [r.verdict for r in results] == ["passed", "memory_limit", "memory_limit"], results


def test_test_groups_and_server_groups_are_removed():
    with JudgePool(workers=1, timeout=1.0) as p:
        if not p.isolation.get("cgroup"):
            pytest.skip("no cgroups here")
        dirs = p.isolation["cgroup_dirs"]
        sleeper = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nprint(6)"  # left behind
        assert p.judge([SIX], [sleeper])[0].passed
        assert all(not os.path.exists(os.path.join(d, "t")) for d in dirs)
    assert not any(os.path.exists(d) for d in dirs)


def test_a_judge_python_under_tmp_keeps_its_import_paths(tmp_path):
    """A venv under /tmp (hidden by the private /tmp unless mounted there again)."""
    venv = f"/tmp/mcj-venv-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    try:
        site = subprocess.run(
            [f"{venv}/bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        module = f"mcj_probe_{uuid.uuid4().hex[:8]}"
        with open(f"{site}/{module}.py", "w") as f:
            f.write("ANSWER = 6\n")
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(evaluate.__file__)))
        script = (
            f"import sys\nsys.path.insert(0, {package_root!r})\n"
            "from microcoder_jax.judge import JudgePool, Problem, TestCase\n"
            "with JudgePool(workers=1, timeout=2.0) as p:\n"
            f"    r = p.judge([Problem('x', [TestCase('', '6\\n')])], ['import {module}\\nprint({module}.ANSWER)'])[0]\n"
            "    print(p.isolation['minimal_root'], r.verdict, r.reason)\n"
        )
        out = subprocess.run(
            [f"{venv}/bin/python", "-c", script], check=True, capture_output=True, text=True, timeout=120
        ).stdout.split()
        assert out[1] == "passed", out
    finally:
        subprocess.run(["rm", "-rf", venv], check=True)
