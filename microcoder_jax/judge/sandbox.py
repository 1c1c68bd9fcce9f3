"""What runs inside the forked child: fds, limits, privilege drop, then the program itself.

Standard library only: the fork server loads this file without importing the package. `enter`
never returns; the child's exit code and the status line on fd 3 tell the server what happened.
The status line is written by code the program could tamper with, so the judge treats it as a
hint for the verdict, never as evidence of a correct answer.
"""

import array
import atexit
import collections
import ctypes
import errno
import fcntl
import json
import math
import numbers
import os
import resource
import sys
import traceback
import types

# Exit codes of a child whose harness (not the program) reports something.
EXIT_SETUP = 120  # the sandbox could not be set up
EXIT_COMPILE = 121
EXIT_MEMORY = 122

# Names a LeetCode-style call-based solution may use without importing them (as on LeetCode).
PRELUDE_SRC = """
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
PRELUDE: dict = {}  # built once by the server (build_prelude), shared by every fork


def scrub_environment(workdir: str) -> None:
    """The environment programs see; set once in the server, so forks inherit it for free."""
    os.environ.clear()
    os.environ.update(
        {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "HOME": workdir,
            "TMPDIR": workdir,
        }
    )


_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWIPC, _CLONE_NEWNET = 0x08000000, 0x40000000
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR, KEYCTL_INVALIDATE = 0, 1, 7, 21
# keyctl(2) has no libc wrapper: its syscall number per architecture.
KEYCTL_SYSCALL = (
    {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 280, "s390x": 280, "i686": 288, "armv7l": 311}.get(
        os.uname().machine
    )
    if os.name == "posix"
    else None
)
_LINUX = sys.platform.startswith("linux")
_LIBC = ctypes.CDLL(None, use_errno=True) if _LINUX else None  # resolved once, not per fork
MAX_CODE = 16 << 20


def build_prelude() -> None:
    exec(PRELUDE_SRC, PRELUDE)
    PRELUDE.pop("__builtins__", None)


def enter(req: dict, ctx: dict, workdir: str, fds: list, join_cgroup) -> None:
    """Runs in the forked child; never returns. fds: the program's stdin and stdout, the status
    pipe and the code pipe, all handed over by the judge (the server never reads them)."""
    try:
        in_r, out_w, st_w, code_r = (fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds)  # above 0-5
        join_cgroup()  # first: every CPU second and byte of the test is counted from here on
        os.setsid()  # own session and process group, killed whole
        null = os.open(os.devnull, os.O_RDWR)
        call = req["mode"] in ("call", "assert")
        for fd, target in ((code_r, 5), (in_r, 0), (out_w, 1), (null, 2), (st_w, 3), (null, 4)):
            os.dup2(fd, target)
        os.closerange(6, ctx["max_fd"])  # the server's socket to the judge and cgroup files included
        _apply_limits(req, ctx)
        os.chdir(workdir)
        # System V and POSIX IPC objects, and abstract UNIX sockets, die with the test.
        flags = (_CLONE_NEWIPC if ctx["ipc_ns"] else 0) | (_CLONE_NEWNET if ctx["program_net_ns"] else 0)
        if flags:
            _unshare(flags)
        if ctx["uid"] is not None:
            _drop_to(ctx["uid"])
        elif _LINUX:
            _drop_capabilities()  # root of the server's user namespace, but without its powers
        if ctx["keyring"]:
            _keyctl(KEYCTL_JOIN_SESSION_KEYRING, 0)  # a fresh, empty session keyring
        if _LIBC is not None:  # on Linux
            _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binaries to climb back
        if ctx["syscall_filter"] is not None:
            ctx["syscall_filter"]()  # last: from here on no key, namespace or mount can be made
        req["code"] = _read_all(5, MAX_CODE).decode("utf-8", errors="surrogateescape")
        os.close(5)
        if call:  # the arguments (or test code) come on stdin; the program's stdin/stdout are not judged
            req["input"] = _read_all(0, MAX_CODE).decode("utf-8", errors="replace")
            os.dup2(4, 0)
            os.dup2(4, 1)
        os.close(4)
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_SETUP)
    os._exit(_run_program(req))


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit and (chunk := os.read(fd, 1 << 16)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _unshare(flags: int) -> None:
    assert _LIBC is not None  # namespaces are Linux's
    if _LIBC.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")


def _keyctl(op: int, arg: int, arg2: int = 0) -> int:
    assert _LIBC is not None and KEYCTL_SYSCALL is not None  # callers check for keyctl
    return _LIBC.syscall(
        ctypes.c_long(KEYCTL_SYSCALL),
        ctypes.c_long(op),
        ctypes.c_long(arg),
        ctypes.c_long(arg2),
        ctypes.c_long(0),
        ctypes.c_long(0),
    )


def clear_user_keyrings() -> bool:
    """Empty and discard this uid's user and user-session keyrings (what a program linked there
    would otherwise outlive the test); the kernel makes fresh ones when next asked. With the
    syscall filter no program can make a key, so this is a second line: False when any step
    failed (a keyring we could not find or clear), which the judge logs and counts."""
    # Both ids first: looking either up (re)creates the pair. KEY_SPEC_USER(_SESSION)_KEYRING.
    # ENOKEY: the last test's, invalidated and not yet collected; nothing can be linked there.
    keys = [_keyctl(KEYCTL_GET_KEYRING_ID, spec, 0) for spec in (-4, -5)]
    errors = [ctypes.get_errno() if key < 0 else 0 for key in keys]
    ok = all(key > 0 or error == errno.ENOKEY for key, error in zip(keys, errors))
    for key in keys:
        if key > 0:
            ok = _keyctl(KEYCTL_CLEAR, key) == 0 and ok
            ok = _keyctl(KEYCTL_INVALIDATE, key) == 0 and ok
    return ok


def _drop_to(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _drop_capabilities() -> None:
    """capset(2) to nothing: a program that is uid 0 of a user namespace may not mount, unmount
    or remount anything there (the server's read-only root and private /tmp stay as they are)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    assert _LIBC is not None  # called on Linux only
    if _LIBC.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _apply_limits(req: dict, ctx: dict) -> None:
    memory = int(req["memory_mb"]) << 20
    # A backstop above the limit: the verdict comes from the server's own CPU measurement.
    cpu = math.ceil(req["timeout"]) + 1
    limits = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_FSIZE, req["output_limit"], req["output_limit"]),
        (resource.RLIMIT_NOFILE, 256, 256),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if _LINUX and not ctx["cgroup_memory"]:  # macOS does not enforce RLIMIT_AS, and refuses some values
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
            data = data[os.write(3, data) :]
    except BaseException:  # noqa: BLE001 - the program may have closed or replaced fd 3
        pass


def _describe(exc: BaseException, code: str | None = None) -> str:
    """`Type: message`; given the program's `code`, also the program's line the error came from
    (the innermost frame in solution.py), as a traceback's last lines would show it."""
    try:
        text = f"{type(exc).__name__}: {exc}"[:220]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = "exception"
    try:
        # walk_tb reads no source file (extract_tb would open "solution.py" through linecache)
        where = [n for f, n in traceback.walk_tb(exc.__traceback__) if f.f_code.co_filename == "solution.py"]
        if code is not None and where and where[-1]:
            lines = code.splitlines()
            line = lines[where[-1] - 1].strip() if where[-1] <= len(lines) else ""
            text += f" (line {where[-1]}: {line[:60]})" if line else f" (line {where[-1]})"
    except BaseException:  # noqa: BLE001 - a hostile traceback never hides the error itself
        pass
    return text[:300]


def _run_program(req: dict) -> int:
    """Compile and run the program as `__main__` (stdin) or call its entry point; the exit code."""
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
    stdout = sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.argv = ["solution.py"]
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)  # big integers print, as on judges without the limit
    atexit._clear()
    status: dict = {"status": "ok"}
    code = 0
    try:
        compiled = _compile(req)
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError) as e:
        _report({"status": "compile_error", "error": _describe(e)})
        return EXIT_COMPILE
    call = req["mode"] in ("call", "assert")
    module = types.ModuleType("solution" if call else "__main__")
    module.__file__ = "solution.py"
    if call:
        module.__dict__.update(PRELUDE)
        module.__dict__["__name__"] = "solution"
        sys.setrecursionlimit(50000)
    sys.modules[module.__name__] = module
    if req.get("harness") == "apps":
        module.__dict__["__top_level_return__"] = _TopLevelReturn
    try:
        check = _load_check(req["input"], module.__dict__) if req["mode"] == "assert" else None
    except BaseException as e:  # noqa: BLE001 - the problem's own test code is broken
        _report({"status": "test_error", "error": _describe(e)})
        return 1
    try:
        try:
            exec(compiled, module.__dict__)
        except _TopLevelReturn:  # the "apps" harness: a top-level `return` ends the program
            pass
        if req["mode"] == "call":
            status["result"] = _call(module.__dict__, req)
            if len(status["result"]) > req.get("return_limit", MAX_CODE):  # the judge caps it too
                status = {"status": "output_limit", "error": "return value over the limit"}
        elif req["mode"] == "assert":
            status["result"] = _run_check(check, module.__dict__, req)
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
        status, code = {"status": "runtime_error", "error": _describe(e, req["code"])}, 1
    for out in {id(stdout): stdout, id(sys.stdout): sys.stdout}.values():
        try:
            out.flush()
        except BaseException:  # noqa: BLE001
            pass
    _report(status)
    return code


class _TopLevelReturn(BaseException):
    """What a top-level `return` raises under the "apps" harness (see _compile)."""


def _compile(req: dict):
    """The program's code object. Harness "apps" (APPS/TACO rows: their harness runs a stdin
    program inside a function) also accepts a top-level `return`: each one becomes a raise of
    _TopLevelReturn (its value still evaluated), which ends the program normally. Programs that
    compile as they are run exactly as under harness "plain"."""
    try:
        return compile(req["code"], "solution.py", "exec", dont_inherit=True)
    except SyntaxError as e:
        if req.get("harness") != "apps" or req["mode"] != "stdin" or "outside function" not in str(e.msg):
            raise
    import ast

    class TopLevelReturns(ast.NodeTransformer):
        def visit_Return(self, node):
            exc = ast.Call(ast.Name("__top_level_return__", ast.Load()), [node.value] if node.value else [], [])
            return ast.copy_location(ast.Raise(exc=exc, cause=None), node)

        def skip(self, node):  # a return inside a def, lambda or class body is an ordinary one
            return node

        visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = skip

    tree = ast.fix_missing_locations(TopLevelReturns().visit(ast.parse(req["code"], "solution.py")))
    return compile(tree, "solution.py", "exec", dont_inherit=True)


def _load_check(test_code: str, namespace: dict):
    """An assert test's `check(candidate)`: the test code runs in its own namespace (LeetCode
    names preloaded); the helpers it defines (ListNode, tree_node ...) are copied to the program's."""
    tests = dict(PRELUDE)
    exec(compile(test_code, "test.py", "exec", dont_inherit=True, optimize=0), tests)
    check = tests.get("check")
    if not callable(check):
        raise NameError("the test code defines no check(candidate)")
    namespace.update({k: v for k, v in tests.items() if k not in PRELUDE and k != "check" and not k.startswith("__")})
    return check


def _run_check(check, namespace: dict, req: dict) -> list:
    """["pass"], or ["fail", reason] when an assertion of check(candidate) fails."""
    try:
        check(_entry_point(namespace, req["func_name"]))
    except AssertionError as e:
        return ["fail", _describe(e)]
    return ["pass"]


def _entry_point(namespace: dict, name: str):
    """Solution().name (a fresh instance), or the plain function `name`."""
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    if callable(namespace.get(name)):
        return namespace[name]
    raise NameError(f"no Solution.{name} or function {name} defined")


def _call(namespace: dict, req: dict) -> str:
    """Call the entry point with the JSON arguments."""
    fn = _entry_point(namespace, req["func_name"])
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
    ok, reason = verdict if isinstance(verdict, tuple) else (verdict, "")
    return [bool(ok), str(reason)[:300]]


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter does at exit."""
    threading = sys.modules.get("threading")  # the server does not preload it: see worker.py
    if threading is None:
        return
    main = threading.main_thread()
    for t in threading.enumerate():
        if t is not main and not t.daemon:
            t.join()
