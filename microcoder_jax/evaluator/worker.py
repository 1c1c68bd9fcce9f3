"""The sandboxed fork server: runs one untrusted program per request in a fresh forked child.

The pool starts it as `python -I worker.py`. It imports only the standard library (what solutions
commonly import is preloaded, so children start warm), isolates itself once (isolation.py), and
then per request forks a child (sandbox.py: limits, unprivileged uid, private work directory, the
program with real stdin/stdout pipes). The server feeds stdin, collects capped stdout and the
child's status line from fd 3, enforces the wall-clock backstop, reads CPU time from wait4, then
kills every process the program left behind and removes what it wrote. Output is never judged
here: expected outputs never reach this process or its children.

`threading` and `random` are deliberately not preloaded: their at-fork hooks would add about a
millisecond to every fork, paid by every program rather than by the few that import them.

Wire format (both directions): 8-byte little-endian length, a JSON header, then the raw bytes
values it lists. Requests are dicts (see `run_request`); the first message the server sends is
{"hello": isolation_report}. No pickle: a server a program had somehow subverted still could not
run code in the judge by what it sends back.
"""
# What solutions commonly import, preloaded so that every forked child starts warm.
import array  # noqa: F401
import bisect  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import functools  # noqa: F401
import heapq  # noqa: F401
import io  # noqa: F401
import itertools  # noqa: F401
import json
import math  # noqa: F401
import operator  # noqa: F401
import re  # noqa: F401
import string  # noqa: F401
import typing  # noqa: F401
# What the server itself needs.
import ctypes
import gc
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback


def _sibling(name: str):
    """Load evaluator/<name>.py without importing the package: the server stays stdlib-only."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_microcoder_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:  # imported by the pool, for the wire format
    from microcoder_jax.evaluator import isolation, sandbox
else:  # run by the pool as a script
    isolation, sandbox = _sibling("isolation"), _sibling("sandbox")


# --------------------------------------------------------------------------------------------
# wire format


def send_msg(fd: int, msg: dict) -> None:
    """Write one message: a flat dict of JSON values and bytes (no pickle: decoding runs no code)."""
    blobs = [(k, bytes(v)) for k, v in msg.items() if isinstance(v, (bytes, bytearray, memoryview))]
    head = {k: v for k, v in msg.items() if not isinstance(v, (bytes, bytearray, memoryview))}
    head["__blobs__"] = [(k, len(v)) for k, v in blobs]
    data = json.dumps(head).encode()
    view = memoryview(b"".join([struct.pack("<Q", len(data)), data, *(v for _, v in blobs)]))
    while view:
        view = view[os.write(fd, view):]


def recv_msg(fd: int) -> dict | None:
    """The next message, or None at end of stream."""
    size = _read_exact(fd, 8)
    if size is None:
        return None
    head = _read_exact(fd, struct.unpack("<Q", size)[0])
    if head is None:
        raise EOFError("stream ended inside a message")
    msg = json.loads(head)
    for key, length in msg.pop("__blobs__"):
        blob = _read_exact(fd, length) if length else b""
        if blob is None:
            raise EOFError("stream ended inside a message")
        msg[key] = blob
    return msg


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
# the server side of one request


def run_request(req: dict, ctx: dict) -> dict:
    """Fork a child for `req`, watch it, clean up after it, and describe what happened.

    req: mode ("stdin" | "call" | "check"), code, input (bytes for stdin/check, str for call),
    func_name, timeout (CPU seconds), wall_timeout (seconds), memory_mb, output_limit (bytes).
    """
    start = time.monotonic()
    workdir = ctx["workdir"]  # one program at a time per server, so one fixed path
    if os.path.lexists(workdir):  # the last cleanup failed: move the remains out of the way
        os.rename(workdir, f"{workdir}.stale-{time.monotonic_ns()}")
    os.mkdir(workdir, 0o700)
    if ctx["uid"] is not None:
        os.chown(workdir, ctx["uid"], ctx["uid"])
    os.chmod(workdir, 0o700)
    fds = [*os.pipe(), *os.pipe(), *os.pipe()]
    in_r, in_w, out_r, out_w, st_r, st_w = fds
    pid, watched = -1, False
    try:
        pid = os.fork()
        if pid == 0:
            try:
                sandbox.enter(req, ctx, workdir, in_r, out_w, st_w)
            finally:
                os._exit(sandbox.EXIT_SETUP)
        for fd in (in_r, out_w, st_w):
            os.close(fd)
            fds.remove(fd)
        reply = _watch(pid, req, ctx, start, in_w, out_r, st_r, fds)
        watched = True  # _watch has killed and reaped everything
        return reply
    finally:
        if pid > 0 and not watched:
            _kill_all(pid, ctx)
        for fd in fds:
            _close(fd)
        _remove(workdir)
        for scratch in ctx["scratch"]:  # private tmpfs mounts: whatever the program left there
            for name in os.listdir(scratch):
                if os.path.join(scratch, name) != isolation.EXPOSED:
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
    own_uid = ctx["uid"] is not None and ctx["uid"] == ctx["own_uid"]
    if own_uid:  # setsid daemons left the group (never for a shared fallback uid such as nobody)
        _kill_uid(ctx["uid"])
    while True:  # as a subreaper, orphans are ours to reap; with our own uid all of them are dying
        try:
            if os.waitpid(-1, 0 if own_uid and ctx["subreaper"] else os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def _kill_uid(uid: int) -> None:
    """Kill every process of this server's sandbox uid, from a helper that has become that uid."""
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == uid and os.geteuid() == uid:  # never kill(-1) with any other identity
                # Everything this uid may signal, but not ourselves. A fork racing the first sweep
                # either shows up for the second or fails on its parent's pending SIGKILL. (The
                # call succeeds whenever any other process exists, so its result says nothing.)
                for _ in range(2):
                    os.kill(-1, signal.SIGKILL)
        except BaseException:  # noqa: BLE001 - ProcessLookupError: nothing (left) to kill
            pass
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _remove(path: str) -> None:
    """Remove a file or tree the program left behind, however deep or unreadable it made it.

    Iterative and with short paths only: the children of each subdirectory are renamed up into
    the top directory until it holds nothing but files, so a million nested directories cost
    neither recursion nor PATH_MAX. Never raises: a failure must not take the server down.
    """
    try:
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return
        moved = 0
        while True:
            os.chmod(path, 0o700)  # the program may have taken our permissions away (not root)
            with os.scandir(path) as it:
                entries = list(it)
            if not entries:
                break
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.path)
                    continue
                os.chmod(entry.path, 0o700)
                with os.scandir(entry.path) as it:
                    for child in it:
                        target = os.path.join(path, f".up{moved}")
                        while os.path.lexists(target):  # names the program chose stay intact
                            moved += 1
                            target = os.path.join(path, f".up{moved}")
                        os.rename(child.path, target)
                os.rmdir(entry.path)
        os.rmdir(path)
    except (OSError, RecursionError, MemoryError):
        pass


# --------------------------------------------------------------------------------------------
# start-up


def _max_fd() -> int:
    """An upper bound on open descriptors, to close all of them in the child."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    bound = soft if soft != resource.RLIM_INFINITY and soft > 0 else os.sysconf("SC_OPEN_MAX")
    return bound if 0 < bound <= 1 << 20 else 1 << 16


def main(argv=None) -> None:
    """argv[0]: JSON config from the pool: uids (own first, then a fallback), tmpdir (this
    server's own directory), max_processes, tmpfs_mb, namespaces (bool), hide (paths)."""
    config = json.loads((sys.argv[1:] if argv is None else argv)[0])
    rfd, wfd = os.dup(0), os.dup(1)  # the pool's pipes, away from the child's 0/1
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    report = isolation.isolate(config["tmpfs_mb"], config["namespaces"], config["hide"])
    uids = config["uids"]
    private = report["private_tmp"]
    report.update(uid=isolation.probe_uid(uids), platform=sys.platform)
    ctx = {
        "base": "/tmp" if private else config["tmpdir"],
        "scratch": isolation.SCRATCH if private else (),
        "uid": report["uid"],
        "own_uid": uids[0] if uids else None,
        "subreaper": not report["pid_ns"] and isolation.become_subreaper(),
        "pid_ns": report["pid_ns"],
        "nproc": isolation.process_limit(report, config["max_processes"]),
        "max_fd": _max_fd(),
    }
    ctx["workdir"] = os.path.join(ctx["base"], "run")
    sandbox.scrub_environment(ctx["workdir"])
    if not private:
        os.chmod(ctx["base"], 0o711)  # a sandbox uid may enter its own directory, not list others
    elif ctx["uid"] is not None:
        isolation.expose_import_paths()
    try:  # glibc's M_ARENA_MAX: threads share one malloc arena, so RLIMIT_AS is not eaten by arenas
        ctypes.CDLL(None).mallopt(-8, 1)
    except (AttributeError, OSError):
        pass
    sandbox.build_prelude()
    # The first compile() of a process builds the ~120 AST node types (~2 ms): do it once here,
    # not in every child.
    compile("pass", "<warm-up>", "exec", dont_inherit=True)
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
