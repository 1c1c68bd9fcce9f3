"""What the fork server does after each test: kill what is left, remove what was written.

Standard library only (the fork server loads it without importing the package).
"""

import os
import signal


def signal_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(pid: int, ctx: dict) -> None:
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
    signal_group(pid)
    own_uid = ctx["own_uid"] is not None and ctx["uid"] == ctx["own_uid"]
    if own_uid:  # setsid daemons left the group (never for a shared fallback uid such as nobody)
        if not kill_uid(ctx["uid"], ctx["clear_keyrings"]):
            ctx["keyrings_failed"] = True  # read (and reset) by the server after the test
    while True:  # as a subreaper, orphans are ours to reap; with our own uid all of them are dying
        try:
            if os.waitpid(-1, 0 if own_uid and ctx["subreaper"] else os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def kill_uid(uid: int, then=None) -> bool:
    """Kill every process of this server's sandbox uid, from a helper that has become that uid
    (which then calls `then`, if given, as that uid); False when `then` returned False or the
    helper could not become the uid."""
    helper = os.fork()
    if helper == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            if os.getuid() == uid and os.geteuid() == uid:  # never kill(-1) with any other identity
                # Everything this uid may signal, but not ourselves. A fork racing the first sweep
                # either shows up for the second or fails on its parent's pending SIGKILL. (The
                # call succeeds whenever any other process exists, so its result says nothing.)
                for _ in range(2):
                    try:
                        os.kill(-1, signal.SIGKILL)
                    except ProcessLookupError:  # nothing (left) to kill
                        pass
                code = 0 if then is None or then() else 1
        except BaseException:  # noqa: BLE001
            pass
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(helper, 0)[1]) == 0


def remove(path: str) -> None:
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


def clean(scratch: str, skeleton) -> None:
    """Empty a private scratch directory, keeping only the read-only mount points that live in it
    (a venv under /tmp) and the directories leading to them: everything else goes."""
    keep = {os.path.dirname(p) for p in skeleton}
    for path in list(keep):
        while path not in ("/", scratch) and path.startswith(scratch + "/"):
            path = os.path.dirname(path)
            keep.add(path)
    mounts = set(skeleton)
    stack = [scratch]
    while stack:
        here = stack.pop()
        try:
            names = os.listdir(here)
        except OSError:
            continue
        for name in names:
            path = os.path.join(here, name)
            if path in mounts:
                continue
            if path in keep and not os.path.islink(path):
                os.chmod(path, 0o755)
                stack.append(path)
            else:
                remove(path)
