"""The sandboxed fork server (a zygote): forks one untrusted program per request, and nothing else.

The pool starts it as `python -I worker.py` with a SOCK_SEQPACKET socket on stdin. It imports only
the standard library (what solutions commonly import is preloaded, so children start warm),
isolates itself once (isolation.py), and then per request receives a small header (mode, limits)
with the program's pipes as file descriptors (SCM_RIGHTS), forks a child (sandbox.py) in a fresh
cgroup where there is one (cgroups.py), watches its CPU time and the wall clock, kills every
process the test left behind, removes what it wrote and answers with exit status, CPU time and
what killed it. The judge writes the code and input and reads the output itself: no test data,
no output and no earlier reply ever enters this process, so no fork of it holds any.

`threading` and `random` are deliberately not preloaded: their at-fork hooks would add about a
millisecond to every fork, paid by every program rather than by the few that import them.

Wire format: one JSON object per SOCK_SEQPACKET message, descriptors alongside; the first message
is the pool's config, the first answer {"hello": isolation_report}. No pickle: a server a program
had somehow subverted still could not run code in the judge by what it sends back.
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
import socket
import sys
import time
import traceback


def _sibling(name: str):
    """Load judge/<name>.py without importing the package: the server stays stdlib-only."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_microcoder_{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __package__:  # imported by the pool, for the wire format
    from microcoder_jax.judge import cgroups, cleanup, isolation, sandbox, syscall_filter
else:  # run by the pool as a script
    isolation, sandbox, cgroups = _sibling("isolation"), _sibling("sandbox"), _sibling("cgroups")
    cleanup, syscall_filter = _sibling("cleanup"), _sibling("syscall_filter")


# --------------------------------------------------------------------------------------------
# wire format


MAX_MESSAGE = 1 << 20
MAX_FDS = 8


def send_msg(sock: socket.socket, msg: dict, fds=()) -> None:
    """One message: a JSON object, with file descriptors passed alongside (SCM_RIGHTS)."""
    data = json.dumps(msg).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


@typing.overload
def recv_msg(sock: socket.socket, with_fds: typing.Literal[False] = False) -> dict | None: ...
@typing.overload
def recv_msg(sock: socket.socket, with_fds: typing.Literal[True]) -> tuple[dict | None, list[int]]: ...
def recv_msg(sock: socket.socket, with_fds: bool = False):
    """The next message (and its descriptors, with_fds=True), or None at end of stream."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            _close(fd)
        raise EOFError("message or descriptors truncated")
    msg = json.loads(data) if data else None
    if with_fds:
        return msg, fds
    for fd in fds:  # descriptors nobody asked for are not kept
        _close(fd)
    return msg


def socketpair() -> tuple:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


# --------------------------------------------------------------------------------------------
# the server side of one request


def run_request(req: dict, fds: list, ctx: dict, sock: socket.socket) -> dict:
    """Fork a child for `req` on the judge's pipes `fds`, watch it, clean up after it.

    req: mode ("stdin" | "call" | "assert" | "check"), harness, func_name, timeout (CPU seconds), wall_timeout
    (seconds), memory_mb, output_limit (bytes). fds: the program's stdin (read end), stdout
    (write end), status pipe (write end) and code pipe (read end).
    """
    start = time.monotonic()
    workdir = ctx["workdir"]  # one program at a time per server, so one fixed path
    if os.path.lexists(workdir):  # the last cleanup failed: move the remains out of the way
        os.rename(workdir, f"{workdir}.stale-{time.monotonic_ns()}")
    os.mkdir(workdir, 0o700)
    if ctx["uid"] is not None:
        os.chown(workdir, ctx["uid"], ctx["uid"])
    os.chmod(workdir, 0o700)
    groups = ctx["groups"]
    pid, watched, procs, reply = -1, False, [], None
    try:
        if groups is not None:
            procs = cgroups.start_test(groups, int(req["memory_mb"]) << 20, ctx["max_processes"])
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        pid = os.fork()
        if pid == 0:
            try:
                sandbox.enter(req, ctx, workdir, fds, lambda: cgroups.join(procs))
            finally:
                os._exit(sandbox.EXIT_SETUP)
        for fd in [*fds, *procs]:
            os.close(fd)
        fds, procs = [], []
        killed, status, wall = _watch(pid, req, ctx, start, sock)
        watched = True  # _watch has killed and reaped everything
        reply = {
            "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
            "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
            "wall": wall,
            "killed": killed,
            "oom": False,
        }
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # every process we reaped
        reply["cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if groups is not None:
            measured = cgroups.finish_test(groups, reaped=ctx["pid_ns"])
            reply["oom"] = measured["oom"]
            reply["cpu"] = reply["cpu"] if measured["cpu"] is None else measured["cpu"]
        return reply
    finally:
        if pid > 0 and not watched:
            cleanup.kill_all(pid, ctx)
        if groups is not None and pid > 0 and not watched:
            cgroups.finish_test(groups)
        for fd in [*fds, *procs]:
            _close(fd)
        cleanup.remove(workdir)
        for scratch in ctx["scratch"]:  # private tmpfs mounts: whatever the program left there
            cleanup.clean(scratch, ctx["skeleton"])
        if ctx["keyring"]:
            helper_failed = ctx.pop("keyrings_failed", False)
            cleared = _clear_keyrings(ctx) and not helper_failed
            if not cleared and reply is not None:
                reply["keyrings_not_cleared"] = True  # the judge logs and counts it


def _watch(pid, req, ctx, start, sock) -> tuple:
    """Wait for the child; kill it at the CPU limit (measured here), the wall-clock backstop, or
    when the judge asks (output limit). (killed, wait status, wall seconds), all reaped."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    try:  # readable when the child exits (Linux 5.3+); otherwise poll its state every 5 ms
        pidfd = os.pidfd_open(pid)
        poller.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        pidfd = None
    timeout, deadline = float(req["timeout"]), start + float(req["wall_timeout"])
    next_check = start + timeout
    killed, waited = None, None
    try:
        while waited is None and killed is None:
            now = time.monotonic()
            wake = min(deadline, next_check)
            left_ms = max(0, int((wake - now) * 1000)) + 1
            for fd, _ in poller.poll(left_ms if pidfd is not None else min(left_ms, 5)):
                if fd == sock.fileno():
                    msg = recv_msg(sock)
                    killed = "judge" if msg is None else str(msg.get("kill", "judge"))
            done = os.waitpid(pid, os.WNOHANG)
            waited = done[1] if done[0] else None
            now = time.monotonic()
            if killed is None and waited is None and now >= next_check:
                used = _cpu_so_far(pid, ctx)
                if used > timeout:
                    killed = "cpu"
                next_check = now + max(0.01, timeout - used)
            if killed is None and waited is None and now > deadline:
                killed = "wall"
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if waited is None:
        cleanup.signal_group(pid)
        waited = os.waitpid(pid, 0)[1]
    cleanup.kill_all(pid, ctx)  # nothing may keep writing once the child is gone
    return killed, waited, time.monotonic() - start


def _cpu_so_far(pid: int, ctx: dict) -> float:
    """CPU seconds of the test so far: its cgroup's; else, in our PID namespace, every live
    process's own and its reaped children's; else the child's alone."""
    if ctx["groups"] is not None:
        used = cgroups.cpu_seconds(ctx["groups"])
        if used is not None:
            return used
    pids = [pid]
    if ctx["pid_ns"]:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except (OSError, ValueError, IndexError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def _clear_keyrings(ctx: dict) -> bool:
    """Discard the keyrings a program of our sandbox uid (or, without one, of our own) filled;
    False when that failed. Without a PID namespace the helper that kills the uid's processes
    has done it already (and said so in ctx["keyrings_failed"]); a shared fallback uid's are
    left alone (other users' keys)."""
    if ctx["uid"] is None:
        return sandbox.clear_user_keyrings()
    if ctx["uid"] == ctx["own_uid"] and ctx["pid_ns"]:
        # Every process of the uid is dead (it lives only in our namespace), so for a moment we
        # may be it ourselves, without a fork: the kernel finds user keyrings by the real uid.
        os.setresuid(ctx["uid"], ctx["uid"], 0)
        try:
            return sandbox.clear_user_keyrings()
        finally:
            os.setresuid(0, 0, 0)
    return True


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# --------------------------------------------------------------------------------------------
# start-up


def _max_fd() -> int:
    """An upper bound on open descriptors, to close all of them in the child."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    bound = soft if soft != resource.RLIM_INFINITY and soft > 0 else os.sysconf("SC_OPEN_MAX")
    return bound if 0 < bound <= 1 << 20 else 1 << 16


def main() -> None:
    """The first message on the socket (stdin) is the config from the pool: uids (own first, then
    a fallback), tmpdir (this server's own directory), max_processes, tmpfs_mb, namespaces
    (bool), cgroups (bool), hide (paths). It comes on the socket, not argv, where /proc shows it."""
    sock = socket.socket(fileno=os.dup(0))
    config = recv_msg(sock)
    if config is None:  # the pool's process ended before sending it (a signal during set-up)
        return
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    name = f"mcj-judge-{os.getpid()}"
    groups = cgroups.open_groups(name) if config["cgroups"] else None  # before leaving the host's /sys
    if groups is not None and groups["version"] is None:
        groups = None
    try:
        report = isolation.isolate(config["tmpfs_mb"], config["namespaces"], config["hide"], new_root=config["tmpdir"])
        report["program_net_ns"] = report["program_net_ns"] and config["program_net_ns"]
    except BaseException:
        if groups is not None:  # never leave a group behind on the host
            cgroups.close_groups(groups)
        raise
    uids = config["uids"]
    private = report["private_tmp"]
    prepared, report["seccomp_note"] = None, config["seccomp_note"]
    if config["seccomp"]:  # the judge's libseccomp built it; installed in each child (sandbox.py)
        prepared = syscall_filter.prepare(bytes.fromhex(config["seccomp"]))
        failed = syscall_filter.probe(prepared, sandbox.KEYCTL_SYSCALL)
        prepared = None if failed else prepared
        report["seccomp_note"] = failed or report["seccomp_note"]
    report["seccomp"] = prepared is not None
    report.update(
        uid=isolation.probe_uid(uids),
        platform=sys.platform,
        cgroup=groups["version"] if groups else None,
        cgroup_controllers=groups["controllers"] if groups else [],
        cgroup_dirs=groups["dirs"] if groups else [],
        # our own fresh session keyring: the probe (Docker's default seccomp refuses keyctl)
        keyring=sys.platform.startswith("linux")
        and sandbox.KEYCTL_SYSCALL is not None
        and sandbox._keyctl(sandbox.KEYCTL_JOIN_SESSION_KEYRING, 0) > 0,
    )
    ctx = {
        "base": "/tmp" if private else config["tmpdir"],
        "scratch": isolation.SCRATCH if private else (),
        "skeleton": report.pop("skeleton"),
        "uid": report["uid"],
        "own_uid": uids[0] if uids else None,
        "subreaper": not report["pid_ns"] and isolation.become_subreaper(),
        "pid_ns": report["pid_ns"],
        "ipc_ns": report["ipc_ns"],
        "program_net_ns": report["program_net_ns"],
        "syscall_filter": None if prepared is None else lambda: syscall_filter.install(prepared),
        "keyring": report["keyring"],
        "clear_keyrings": sandbox.clear_user_keyrings if report["keyring"] else None,
        "groups": groups,
        "cgroup_memory": groups is not None and "memory" in groups["controllers"],
        "max_processes": config["max_processes"],
        "nproc": isolation.process_limit(report, config["max_processes"]),
        "max_fd": _max_fd(),
    }
    ctx["workdir"] = os.path.join(ctx["base"], "run")
    sandbox.scrub_environment(ctx["workdir"])
    if not private:
        os.chmod(ctx["base"], 0o711)  # a sandbox uid may enter its own directory, not list others
    if sys.platform.startswith("linux"):  # no ptrace or /proc/1/mem for a program of our own uid
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    try:  # glibc's M_ARENA_MAX: threads share one malloc arena, so RLIMIT_AS is not eaten by arenas
        ctypes.CDLL(None).mallopt(-8, 1)
    except (AttributeError, OSError):
        pass
    sandbox.build_prelude()
    # The first compile() of a process builds the ~120 AST node types (~2 ms): do it once here,
    # not in every child.
    compile("pass", "<warm-up>", "exec", dont_inherit=True)
    del config
    gc.collect()
    gc.freeze()  # keep the warm heap out of the children's copy-on-write faults
    try:
        send_msg(sock, {"hello": report})
        while True:
            req, fds = recv_msg(sock, with_fds=True)
            if req is None:
                break
            if "kill" in req and not fds:  # a kill that came after its program had ended
                continue
            try:
                if len(fds) != 4:
                    raise ValueError(f"expected 4 descriptors, got {len(fds)}")
                reply = run_request(req, fds, ctx, sock)
            except Exception:  # noqa: BLE001 - report, keep serving
                for fd in fds:
                    _close(fd)
                reply = {"error": traceback.format_exc(limit=5)}
            send_msg(sock, reply)
    except (BrokenPipeError, ConnectionError, EOFError):
        pass  # the pool is gone: so are we, and the namespace with everything in it
    finally:
        if groups is not None:
            cgroups.close_groups(groups)


if __name__ == "__main__":
    main()
