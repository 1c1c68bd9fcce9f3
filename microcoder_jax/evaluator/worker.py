"""The sandboxed fork server: runs one untrusted program per request in a fresh forked child.

The pool starts it as `python -I worker.py`. It imports only the standard library (what solutions
commonly import is preloaded, so children start warm), isolates itself once (new PID and network
namespaces when the OS allows), and then per request forks a child that drops to an unprivileged
uid, applies resource limits, chdirs into a private temporary directory and runs the program with
real stdin/stdout pipes. The server feeds stdin, collects capped stdout and a status line from
fd 3, enforces the wall-clock backstop, reads CPU time from wait4, then kills every process the
program left behind and removes the directory. Output is never judged here: expected outputs
never reach this process or its children.

`threading` and `random` are deliberately not preloaded: their at-fork hooks would add about a
millisecond to every fork, paid by every program rather than by the few that import them.

Wire format (both directions): 8-byte little-endian length, then a pickle. Requests are dicts
(see `run_request`); the first message the server sends is {"hello": isolation_report}.
"""
import array  # noqa: F401  (preloaded for solutions)
import atexit
import bisect  # noqa: F401
import builtins
import collections  # noqa: F401
import copy  # noqa: F401
import ctypes
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import gc
import heapq  # noqa: F401
import io
import itertools  # noqa: F401
import json
import math
import numbers
import operator  # noqa: F401
import os
import pickle
import re
import resource
import select
import shutil
import signal
import string  # noqa: F401
import struct
import sys
import time
import traceback
import types
import typing  # noqa: F401

# Exit codes of a child whose harness (not the program) reports something.
EXIT_SETUP = 120  # the sandbox could not be set up
EXIT_COMPILE = 121
EXIT_MEMORY = 122

# Names a LeetCode-style call-based solution may use without importing them (as on LeetCode).
_PRELUDE_SRC = """
from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from itertools import *
from functools import *
from operator import *
from typing import *
from builtins import *
import string, re, datetime, collections, heapq, bisect, copy, math
import itertools, functools, operator, typing, sys, os, io, json
"""
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1"}

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_SCRATCH = ("/tmp", "/dev/shm")  # world-writable scratch space; private and emptied per run when we can
_EXPOSED = "/tmp/.python"  # read-only views of import paths a sandbox uid could not read
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_LINUX = sys.platform.startswith("linux")
_LIBC = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


# --------------------------------------------------------------------------------------------
# framing


def send_msg(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def recv_msg(fd: int):
    """The next message, or None at end of stream."""
    head = _read_exact(fd, 8)
    if head is None:
        return None
    (size,) = struct.unpack("<Q", head)
    body = _read_exact(fd, size)
    if body is None:
        raise EOFError("stream ended inside a message")
    return pickle.loads(body)


def _read_exact(fd: int, size: int):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------------------------
# the child: limits, isolation, and the program itself


def _child(req: dict, ctx: dict, workdir: str, in_r: int, out_w: int, st_w: int) -> None:
    """Runs in the forked child; never returns."""
    try:
        os.setsid()  # own session and process group, killed whole
        null = os.open(os.devnull, os.O_RDWR)
        call = req["mode"] == "call"
        os.dup2(null if call else in_r, 0)
        os.dup2(null if call else out_w, 1)  # a call-based program's prints are not judged
        os.dup2(null, 2)
        os.dup2(st_w, 3)
        os.closerange(4, ctx["max_fd"])  # the server's pipes to the pool included
        _apply_limits(req, ctx)
        os.chdir(workdir)
        os.environ.clear()
        os.environ.update(_ENV, HOME=workdir, TMPDIR=workdir)
        if ctx["uid"] is not None:
            os.setgroups([])
            os.setgid(ctx["uid"])
            os.setuid(ctx["uid"])
        if _LINUX:
            _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binaries to climb back
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_SETUP)
    os._exit(_run_program(req))


def _apply_limits(req: dict, ctx: dict) -> None:
    memory = int(req["memory_mb"]) << 20
    cpu = max(1, math.ceil(req["timeout"]))  # SIGXCPU at the soft limit, SIGKILL one second later
    limits = [(resource.RLIMIT_CPU, cpu, cpu + 1),
              (resource.RLIMIT_FSIZE, req["output_limit"], req["output_limit"]),
              (resource.RLIMIT_NOFILE, 256, 256),
              (resource.RLIMIT_CORE, 0, 0)]
    if _LINUX:  # macOS does not enforce RLIMIT_AS, and refuses some values
        limits.append((resource.RLIMIT_AS, memory, memory))
    if ctx["nproc"] is not None:
        limits.append((resource.RLIMIT_NPROC, ctx["nproc"], ctx["nproc"]))
    for which, soft, hard in limits:
        resource.setrlimit(which, (soft, hard))
    _, stack_hard = resource.getrlimit(resource.RLIMIT_STACK)
    stack = min(memory, 256 << 20)
    if stack_hard != resource.RLIM_INFINITY:
        stack = min(stack, stack_hard)
    try:  # deep recursion: let the main stack grow (as contest judges do)
        resource.setrlimit(resource.RLIMIT_STACK, (stack, stack_hard))
    except (ValueError, OSError):
        pass


def _report(status: dict) -> None:
    try:
        data = memoryview(json.dumps(status).encode())
        while data:
            data = data[os.write(3, data):]
    except BaseException:  # noqa: BLE001 - the program may have closed or replaced fd 3
        pass


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = "exception"
    return text[:300]


def _run_program(req: dict) -> int:
    """Compile and run the program as `__main__` (stdin) or call its entry point; the exit code."""
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    stdout = sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",
                                       closefd=False)
    sys.argv = ["solution.py"]
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # big integers print, as on judges without the limit
    atexit._clear()
    status, code = {"status": "ok"}, 0
    try:
        compiled = compile(req["code"], "solution.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        _report({"status": "compile_error", "error": _describe(e)})
        return EXIT_COMPILE
    call = req["mode"] == "call"
    module = types.ModuleType("solution" if call else "__main__")
    module.__file__ = "solution.py"
    if call:
        module.__dict__.update(_PRELUDE)
        module.__dict__["__name__"] = "solution"
        sys.setrecursionlimit(50000)
    sys.modules[module.__name__] = module
    try:
        exec(compiled, module.__dict__)
        if call:
            status["result"] = _call(module.__dict__, req)
        elif req["mode"] == "check":
            status["result"] = _check(module.__dict__)
        _join_threads()
        atexit._run_exitfuncs()
    except SystemExit as e:
        if e.code not in (None, 0):
            status, code = {"status": "runtime_error", "error": f"exit code {e.code!r}"[:300]}, 1
        elif call or req["mode"] == "check":
            status, code = {"status": "runtime_error", "error": "exited before returning"}, 1
    except MemoryError:
        module.__dict__.clear()
        status, code = {"status": "memory_limit", "error": "MemoryError"}, EXIT_MEMORY
    except BaseException as e:  # noqa: BLE001 - any failure of the program is its runtime error
        status, code = {"status": "runtime_error", "error": _describe(e)}, 1
    for out in {id(stdout): stdout, id(sys.stdout): sys.stdout}.values():
        try:
            out.flush()
        except BaseException:  # noqa: BLE001
            pass
    _report(status)
    return code


def _call(namespace: dict, req: dict) -> str:
    """Call Solution().func_name (a fresh instance) or a plain function with the JSON arguments."""
    name = req["func_name"]
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        fn = getattr(cls(), name)
    elif callable(namespace.get(name)):
        fn = namespace[name]
    else:
        raise NameError(f"no Solution.{name} or function {name} defined")
    args = [json.loads(line) for line in req["input"].split("\n") if line.strip()]
    result = fn(*args)
    try:
        return json.dumps(result, default=_plain, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return json.dumps({"__repr__": repr(result)[:200]})


def _plain(obj):
    """JSON fallback for common non-JSON return types; anything else is not an answer."""
    if hasattr(obj, "tolist"):  # NumPy arrays and scalars
        return obj.tolist()
    if isinstance(obj, (collections.deque, range, array.array)):
        return list(obj)
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON data")


def _check(namespace: dict) -> list:
    """Checker mode: stdin holds {"input", "expected", "output"}; returns [ok, reason]."""
    data = json.loads(sys.stdin.read())
    verdict = namespace["check"](data["input"], data["expected"], data["output"])
    ok, reason = (verdict if isinstance(verdict, tuple) else (verdict, ""))
    return [bool(ok), str(reason)[:300]]


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter does at exit."""
    threading = sys.modules.get("threading")  # not preloaded: see the module docstring
    if threading is None:
        return
    main = threading.main_thread()
    for t in threading.enumerate():
        if t is not main and not t.daemon:
            t.join()


# --------------------------------------------------------------------------------------------
# the server side of one request


def run_request(req: dict, ctx: dict) -> dict:
    """Fork a child for `req`, watch it, clean up after it, and describe what happened.

    req: mode ("stdin" | "call" | "check"), code, input (bytes for stdin/check, str for call),
    func_name, timeout (CPU seconds), wall_timeout (seconds), memory_mb, output_limit (bytes).
    """
    start = time.monotonic()
    workdir = os.path.join(ctx["base"], f"run-{next(_RUNS)}")
    os.mkdir(workdir, 0o700)
    if ctx["uid"] is not None:
        os.chown(workdir, ctx["uid"], ctx["uid"])
    os.chmod(workdir, 0o700)
    fds = [*os.pipe(), *os.pipe(), *os.pipe()]
    in_r, in_w, out_r, out_w, st_r, st_w = fds
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:
            try:
                _child(req, ctx, workdir, in_r, out_w, st_w)
            finally:
                os._exit(EXIT_SETUP)
        for fd in (in_r, out_w, st_w):
            os.close(fd)
            fds.remove(fd)
        return _watch(pid, req, ctx, start, in_w, out_r, st_r, fds)
    finally:
        if pid > 0:
            _kill_all(pid, ctx)
        for fd in fds:
            _close(fd)
        _remove(workdir)
        for scratch in ctx["scratch"]:  # private tmpfs mounts: whatever the program left there
            for name in os.listdir(scratch):
                if os.path.join(scratch, name) != _EXPOSED:
                    _remove(os.path.join(scratch, name))


def _watch(pid, req, ctx, start, in_w, out_r, st_r, fds) -> dict:
    data = req["input"] if req["mode"] != "call" else b""
    pending = memoryview(data.encode() if isinstance(data, str) else data)
    limit = req["output_limit"]
    buffers = {out_r: [], st_r: []}
    sizes = {out_r: 0, st_r: 0}
    poller = select.poll()
    for fd in (out_r, st_r):
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    if pending:
        os.set_blocking(in_w, False)
        poller.register(in_w, select.POLLOUT)
    else:
        _close(in_w)
        fds.remove(in_w)
    try:  # readable when the child exits (Linux 5.3+); otherwise poll its state every 5 ms
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        fds.append(pidfd)
        poller.register(pidfd, select.POLLIN)
    deadline = start + req["wall_timeout"]
    killed, waited = None, None
    while waited is None and killed is None:
        left_ms = max(0, int((deadline - time.monotonic()) * 1000)) + 1
        for fd, _ in poller.poll(left_ms if pidfd is not None else min(left_ms, 5)):
            if fd == in_w:
                try:
                    pending = pending[os.write(in_w, pending[:1 << 16]):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    pending = pending[:0]
                if not pending:  # everything written, or the program closed its stdin
                    poller.unregister(in_w)
                    _close(in_w)
                    fds.remove(in_w)
            elif fd in buffers:
                if _read_some(fd, buffers, sizes, poller) > limit:
                    killed = "output"
            elif fd == pidfd:
                waited = os.wait4(pid, 0)
        if pidfd is None and waited is None:
            done = os.wait4(pid, os.WNOHANG)
            waited = done if done[0] else None
        if killed is None and waited is None and time.monotonic() > deadline:
            killed = "wall"
    if waited is None:
        _signal_group(pid)
        waited = os.wait4(pid, 0)
    _kill_all(pid, ctx)  # nothing may keep writing once the child is gone
    for fd in buffers:
        while sizes[fd] <= limit and _read_some(fd, buffers, sizes, None, drain=True):
            pass
    if max(sizes.values()) > limit:
        killed = "output"
    _, status, usage = waited
    return {
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "stdout": b"".join(buffers[out_r])[:limit],
        "status": b"".join(buffers[st_r])[:limit],
        "cpu": usage.ru_utime + usage.ru_stime,
        "wall": time.monotonic() - start,
        "killed": killed,
    }


def _read_some(fd, buffers, sizes, poller, drain=False) -> int:
    """Read one chunk from `fd` into its buffer; the new size (0 when drained or at EOF)."""
    try:
        chunk = os.read(fd, 1 << 20)
    except BlockingIOError:
        return 0 if drain else sizes[fd]
    if not chunk:
        if poller is not None:
            poller.unregister(fd)
        return 0 if drain else sizes[fd]
    buffers[fd].append(chunk)
    sizes[fd] += len(chunk)
    return sizes[fd]


def _signal_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _kill_all(pid: int, ctx: dict) -> None:
    """Kill and reap everything the program started (all of the PID namespace when we own one)."""
    if ctx["pid_ns"] and os.getpid() == 1:  # never kill(-1) outside our own namespace
        while True:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return
    _signal_group(pid)
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _remove(path: str) -> None:
    """Remove a file or tree the program left behind, even one it made unreadable (when not root)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=_open_up_and_retry)
        else:
            os.unlink(path)
    except OSError:
        pass


def _open_up_and_retry(func, path, _exc_info) -> None:
    parent = os.path.dirname(path)
    try:
        if parent not in _SCRATCH:  # never loosen or tighten the scratch roots themselves
            os.chmod(parent, 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# start-up: isolation of the server itself


def _isolate(tmpfs_mb: int) -> dict:
    """Enter new mount, PID and network namespaces (as PID 1 of the new PID one) where permitted.

    In the new mount namespace the root filesystem is remounted read-only and fresh size-limited
    tmpfs mounts hide the host's /tmp and /dev/shm; /proc is remounted to show only our processes.
    Not root: the same inside a new user namespace, when the kernel allows unprivileged ones.
    """
    report = {"pid_ns": False, "net_ns": False, "user_ns": False, "mount_ns": False,
              "readonly_root": False, "private_tmp": False, "private_proc": False}
    if not _LINUX:
        return report
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    everything = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET
    for flags in (everything, _CLONE_NEWPID | _CLONE_NEWNET, _CLONE_NEWNET):
        flags |= 0 if root else _CLONE_NEWUSER
        if _LIBC.unshare(flags) == 0:
            break
    else:
        return report
    if not root:
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {uid} 1")
            _write("/proc/self/gid_map", f"0 {gid} 1")
            report["user_ns"] = True
        except OSError:
            pass
    report["net_ns"] = True
    if flags & _CLONE_NEWNS and _mount(None, "/", None, _MS_REC | _MS_PRIVATE):
        report["mount_ns"] = True  # from here on, nothing we mount is seen outside
        report["private_tmp"] = all(
            _mount("tmpfs", d, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmpfs_mb}m,mode=1777")
            for d in _SCRATCH if os.path.isdir(d))
        if report["private_tmp"]:  # work directories live there, so the rest may go read-only
            report["readonly_root"] = _remount_readonly()
    if flags & _CLONE_NEWPID:
        child = os.fork()  # the first child is PID 1 of the new namespace: the real server
        if child:
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        report["pid_ns"] = os.getpid() == 1
        if report["pid_ns"] and report["mount_ns"]:
            report["private_proc"] = _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    return report


def _remount_readonly() -> bool:
    """Every filesystem mount read-only in our namespace (kernel and device mounts excepted)."""
    with open("/proc/self/mountinfo") as f:
        points = [_unescape(line.split()[4]) for line in f]
    skip = ("/proc", "/sys", "/dev", *_SCRATCH)
    root_ok = False
    for point in sorted(set(points)):
        if any(point == s or point.startswith(s + "/") for s in skip):
            continue
        try:
            flags = _mount_flags(point)
        except OSError:
            continue
        ok = _mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags)
        root_ok = root_ok or (ok and point == "/")
    return root_ok


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def _mount(source, target, fstype, flags, data=None) -> bool:
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    return _LIBC.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


def _mount_flags(path: str) -> int:
    """The per-mount flags of `path` that a bind remount must keep (locked in user namespaces)."""
    st = os.statvfs(path).f_flag
    pairs = [(os.ST_NOSUID, _MS_NOSUID), (os.ST_NODEV, _MS_NODEV), (os.ST_NOEXEC, _MS_NOEXEC),
             (os.ST_NOATIME, 1024), (os.ST_NODIRATIME, 2048), (os.ST_RELATIME, 1 << 21)]
    return sum(ms for st_flag, ms in pairs if st & st_flag)


def _expose_import_paths() -> None:
    """Make sys.path readable by a sandbox uid.

    A Python installed behind a private directory (under /root, say) cannot be read once the
    child drops its uid; such entries are bind-mounted read-only under /tmp/.python in our own
    mount namespace, and sys.path and every loaded package's __path__ point there from now on.
    """
    moved = {}
    for i, path in enumerate(sys.path):
        if not path or not os.path.exists(path) or _others_can_read(path):
            continue
        target = f"{_EXPOSED}/{i}"
        os.makedirs(_EXPOSED, mode=0o755, exist_ok=True)
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            open(target, "w").close()
        if _mount(path, target, None, _MS_BIND) and _mount(
                None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _mount_flags(target)):
            moved[path] = target

    def relocate(entry):
        for old, new in moved.items():
            if entry == old or entry.startswith(old + os.sep):
                return new + entry[len(old):]
        return entry

    if moved:
        sys.path[:] = [relocate(p) for p in sys.path]
        for module in list(sys.modules.values()):
            if isinstance(getattr(module, "__path__", None), list):
                module.__path__[:] = [relocate(p) for p in module.__path__]
        sys.path_importer_cache.clear()


def _others_can_read(path: str) -> bool:
    path = os.path.realpath(path)
    mode = os.stat(path).st_mode
    if not mode & 0o004 or (os.path.isdir(path) and not mode & 0o001):
        return False
    parent = os.path.dirname(path)
    while parent != path:
        if not os.stat(parent).st_mode & 0o001:
            return False
        path, parent = parent, os.path.dirname(parent)
    return True


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _probe_uid(candidates) -> int | None:
    """The first uid a child can switch to (only root can switch at all)."""
    if os.geteuid() != 0:
        return None
    for uid in candidates:
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                os._exit(0)
            except BaseException:  # noqa: BLE001
                os._exit(1)
        if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0:
            return uid
    return None


def _process_limit(report: dict, max_processes: int) -> int | None:
    """RLIMIT_NPROC for children, where it counts only their processes.

    It counts per uid: with our own sandbox uid that is the program's processes alone; in a user
    namespace on Linux >= 5.14 it counts per namespace (the server itself is one of them).
    Otherwise it would count every process of the user on the host, so none is set.
    """
    if report["uid"] is not None:
        return max_processes
    kernel = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
    if report["user_ns"] and report["pid_ns"] and kernel >= (5, 14):
        return max_processes + 1
    return None


_PRELUDE: dict = {}
_RUNS = itertools.count()


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    opts = dict(a.split("=", 1) for a in argv)
    rfd, wfd = os.dup(0), os.dup(1)  # the pool's pipes, away from the child's 0/1
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    report = _isolate(int(opts.get("tmpfs_mb", 256)))
    uids = [int(u) for u in opts.get("uids", "").split(",") if u]
    private = report["private_tmp"]
    report.update(uid=_probe_uid(uids), platform=sys.platform)
    ctx = {
        "base": "/tmp" if private else opts["tmpdir"],  # the pool made that one for this server alone
        "scratch": _SCRATCH if private else (),
        "uid": report["uid"],
        "pid_ns": report["pid_ns"],
        "nproc": _process_limit(report, int(opts.get("max_processes", 64))),
        "max_fd": os.sysconf("SC_OPEN_MAX"),
    }
    if not private:
        os.chmod(ctx["base"], 0o711)  # a sandbox uid may enter its own directory, not list others
    elif ctx["uid"] is not None:
        _expose_import_paths()
    if _LINUX:
        try:
            _LIBC.mallopt(-8, 1)  # M_ARENA_MAX: threads share one malloc arena under RLIMIT_AS
        except AttributeError:
            pass
    exec(_PRELUDE_SRC, _PRELUDE)
    _PRELUDE.pop("__builtins__", None)
    gc.collect()
    gc.freeze()  # keep the warm heap out of the children's copy-on-write faults
    try:
        send_msg(wfd, {"hello": report})
        while (req := recv_msg(rfd)) is not None:
            try:
                reply = run_request(req, ctx)
            except Exception:  # noqa: BLE001 - report, keep serving
                reply = {"error": traceback.format_exc(limit=5)}
            send_msg(wfd, reply)
    except (BrokenPipeError, EOFError):
        pass  # the pool is gone: so are we, and the namespace with everything in it


if __name__ == "__main__":
    main()
