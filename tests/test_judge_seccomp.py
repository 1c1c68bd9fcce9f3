"""The syscall filter: kernel keys, namespaces and mounts are refused (EPERM) inside every program,
ordinary programs (threads, fork, subprocess) still work, and nothing is left on the host. Each
attack is also run without the sandbox where that is safe, to show it is real."""

import ctypes
import os
import subprocess
import sys
import time
import uuid

import pytest

from microcoder_jax.judge import JudgePool, Problem, TestCase, syscall_filter

SIX = Problem("six", [TestCase("", "6\n")])
LINUX = sys.platform.startswith("linux")
_NR = {
    "x86_64": {"add_key": 248, "keyctl": 250, "unshare": 272, "setns": 308, "clone": 56},
    "aarch64": {"add_key": 217, "keyctl": 219, "unshare": 97, "setns": 268, "clone": 220},
}.get(os.uname().machine)
pytestmark = pytest.mark.skipif(not LINUX or _NR is None, reason="Linux x86_64/aarch64 syscalls")
CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWCGROUP = 0x10000000, 0x20000, 0x02000000
HEAD = (
    "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\nL = ctypes.c_long\n"
    "def call(nr, *args):\n"
    "    r = libc.syscall(L(nr), *[a if isinstance(a, bytes) else L(a) for a in args])\n"
    "    return r, ctypes.get_errno()\n"
)


@pytest.fixture(scope="module")
def pool():
    with JudgePool(workers=1, timeout=2.0, memory_mb=256, output_limit_mb=1, wall_factor=3.0) as p:
        if not p.isolation["seccomp"]:
            pytest.skip(f"no syscall filter here: {p.isolation['seccomp_note']}")
        yield p


def _key_users() -> set:
    with open("/proc/key-users") as f:
        return {int(line.split(":")[0]) for line in f}


def _proc_keys() -> str:
    with open("/proc/keys") as f:
        return f.read()


def _judge_refused(pool, body: str) -> None:
    """`body` sets `tried` to a list of (result, errno); the program passes only if every call
    was refused with EPERM."""
    code = HEAD + body + "\nprint(6 if all(r == -1 and e == errno.EPERM for r, e in tried) else tried)"
    before = _key_users()
    (result,) = pool.judge([SIX], [code])
    assert result.passed, result.reason
    for _ in range(200):  # no key of a sandbox uid left on the host (the kernel collects the
        if not (_key_users() - before) & set(pool.sandbox_uids):  # session keyring shortly after)
            break
        time.sleep(0.02)
    assert not (_key_users() - before) & set(pool.sandbox_uids)


def test_persistent_keyring_is_refused(pool):
    # KEYCTL_GET_PERSISTENT(uid=-1 for our own, link into the session keyring): would outlive every test
    _judge_refused(pool, f"tried = [call({_NR['keyctl']}, 22, -1, -3)]")
    assert not any(
        "_persistent" in line and str(uid) in line for uid in pool.sandbox_uids for line in _proc_keys().splitlines()
    )


def test_a_user_keyring_cannot_be_locked(pool):
    # KEYCTL_SETPERM on KEY_SPEC_USER_KEYRING to nothing: the clearing lookup would then fail
    _judge_refused(pool, f"tried = [call({_NR['keyctl']}, 5, -4, 0), call({_NR['keyctl']}, 0, -4, 1)]")
    assert pool.keyring_failures == 0


def test_no_world_viewable_key_can_be_made(pool):
    desc = f"mcj-{uuid.uuid4().hex[:12]}"
    _judge_refused(
        pool,
        f"tried = [call({_NR['add_key']}, b'user', {desc.encode()!r}, b'x', 1, -3),\n"
        f"         call({_NR['keyctl']}, 5, -3, 0x3f3f3f3f),\n"
        f"         call({_NR['keyctl']}, 11, -3, 0, 0)]",
    )  # KEYCTL_READ
    assert desc not in _proc_keys()


def test_world_viewable_key_control_without_the_sandbox():
    """The attack itself, in a throw-away process with its own session keyring (gone with it)."""
    if os.path.exists("/proc/keys") is False:
        pytest.skip("no /proc/keys")
    desc = f"mcj-{uuid.uuid4().hex[:12]}"
    code = (
        HEAD + f"call({_NR['keyctl']}, 1, 0)\n"  # JOIN_SESSION_KEYRING: an anonymous one
        f"key, e = call({_NR['add_key']}, b'user', {desc.encode()!r}, b'x', 1, -3)\n"
        f"call({_NR['keyctl']}, 5, key, 0x3f3f0101)\n"  # possessor/user all, group/other view
        "print(key, flush=True)\ninput()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        key = int(proc.stdout.readline())
        if key < 0:
            pytest.skip("this host refuses add_key (a seccomp profile of its own)")
        assert desc in _proc_keys()  # listed in /proc/keys: any uid can see it
    finally:
        proc.communicate("\n", timeout=30)


def test_user_namespaces_and_cgroup2_mounts_are_refused(pool):
    body = (
        f"tried = [call({_NR['unshare']}, {CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP}),\n"
        f"         call({_NR['unshare']}, {CLONE_NEWUSER}),\n"
        f"         call({_NR['setns']}, 0, 0),\n"
        f"         call({_NR['clone']}, {CLONE_NEWUSER | 17}, 0, 0, 0, 0)]\n"  # | SIGCHLD
        "import os\nos.makedirs('cg', exist_ok=True)\n"
        "tried.append((libc.mount(b'none', b'cg', b'cgroup2', L(0), None), ctypes.get_errno()))"
    )
    before = _cgroup2_mounts()
    _judge_refused(pool, body)
    assert _cgroup2_mounts() == before


def _cgroup2_mounts() -> int:
    with open("/proc/self/mountinfo") as f:
        return sum(" - cgroup2 " in line for line in f)


def test_user_namespace_control_without_the_sandbox(tmp_path):
    """What a program could do unfiltered: its own user, mount and cgroup namespaces, a cgroup2
    mount there (in a throw-away process; the mount dies with its namespace)."""
    code = (
        HEAD + f"r, e = call({_NR['unshare']}, {CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP})\n"
        "if r != 0:\n    print('refused', e)\n    raise SystemExit\n"
        "libc.mount(None, b'/', None, L(16384 | (1 << 18)), None)\n"  # MS_REC | MS_PRIVATE
        f"print(libc.mount(b'none', {str(tmp_path).encode()!r}, b'cgroup2', L(0), None))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30).stdout
    if out.startswith("refused"):
        pytest.skip(f"this host refuses unprivileged user namespaces ({out.strip()})")
    assert out.strip() == "0"  # mounted
    assert os.listdir(tmp_path) == []  # on the host the directory stays empty


def test_ordinary_programs_still_work_under_the_filter(pool):
    code = (
        "import threading, os, subprocess, sys, multiprocessing\nout = []\n"
        "t = threading.Thread(target=out.append, args=(1,))\nt.start()\nt.join()\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(3)\n"
        "out.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
        "out.append(subprocess.run([sys.executable, '-c', 'print(2)'], capture_output=True).stdout)\n"
        "print(6 if out == [1, 3, b'2\\n'] else out)"
    )
    (result,) = pool.judge([SIX], [code])
    assert result.passed, result.reason


def test_without_libseccomp_the_pool_says_so(monkeypatch):
    monkeypatch.setattr(syscall_filter, "build", lambda: (None, "no libseccomp binding: test"))
    with JudgePool(workers=1, timeout=1.0) as p:
        assert p.isolation["seccomp"] is False
        assert p.isolation["seccomp_note"] == "no libseccomp binding: test"
        assert p.judge([SIX], ["print(6)"])[0].passed


def test_the_filter_checks_the_architecture():
    program, note = syscall_filter.build()
    if program is None:
        pytest.skip(note)
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[os.uname().machine]  # AUDIT_ARCH_*
    insns = [
        (int.from_bytes(program[i : i + 2], "little"), int.from_bytes(program[i + 4 : i + 8], "little"))
        for i in range(0, len(program), 8)
    ]
    # It starts by loading seccomp_data.arch and comparing it with this machine's ABI; anything
    # else (i386 int 0x80, and x32 on x86_64) ends on the refusal, ERRNO(EPERM), never on ALLOW.
    assert insns[0] == (0x20, 4) and insns[1] == (0x15, arch)  # BPF_LD|W|ABS; BPF_JMP|JEQ|K
    assert (0x06, 0x50000 | 1) in insns and (0x06, 0x7FFF0000) in insns  # RET ERRNO(EPERM), RET ALLOW
