"""Per-test cgroups: every process of a test counted, limited and killed together, then removed.

Standard library only (the fork server loads it). The server opens its own parent group once, at
start-up and before it leaves the host's filesystem, on cgroup v2 (the unified hierarchy, as on
TPU VMs) or on v1 hierarchies (one per controller); it keeps directory descriptors, so it can work
there after pivot_root. Each test then gets a fresh child group `t` with a memory limit on
resident memory (plus swap where accounted), a process-count limit and CPU accounting; the
program's child joins it before it runs anything, and after the test the server kills whatever is
left in it, reads its CPU time and OOM count, and removes it.
"""

import os
import signal
import time

WANT = ("memory", "pids", "cpuacct")  # v1 names; v2 has memory and pids, and cpu.stat everywhere
_TEST = "t"


def open_groups(name: str) -> dict:
    """The server's parent group `name` on every hierarchy that has a controller we want.

    Returns {"version": 1 | 2 | None, "controllers": [...], "dirs": [host paths],
    "hierarchies": [{"fd", "v2", "controllers"}]}; version None when no group could be made
    (no cgroup file system, not root, or no write access).
    """
    found = {"version": None, "controllers": [], "dirs": [], "hierarchies": []}
    mounts = _cgroup_mounts()
    v2 = next((m for m in mounts if m[1] == "cgroup2"), None)
    if v2 is not None:
        available = _read_text(os.path.join(v2[0], "cgroup.controllers")).split()
        if {"memory", "pids"} <= set(available):
            group = _make_v2(v2[0], _own_group(""), name)
            if group is not None:
                found.update(version=2, controllers=["cpu", "memory", "pids"], dirs=[group])
                found["hierarchies"].append(_hierarchy(group, True, ["cpu", "memory", "pids"]))
                return found
    for point, kind, controllers in mounts:
        wanted = [c for c in WANT if c in controllers and c not in found["controllers"]]
        if kind != "cgroup" or not wanted:
            continue
        group = os.path.join(point, _own_group(",".join(controllers)).lstrip("/"), name)
        if not _make_dir(group):
            continue
        found["controllers"] += wanted
        found["dirs"].append(group)
        found["hierarchies"].append(_hierarchy(group, False, wanted))
    if found["hierarchies"]:
        found["version"] = 1
    return found


def _make_dir(path: str) -> bool:
    """Create a cgroup directory (an existing one is fine); False where the kernel refuses."""
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError:
        return False
    return True


def _hierarchy(path: str, v2: bool, controllers) -> dict:
    return {
        "fd": os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC),
        "v2": v2,
        "controllers": list(controllers),
    }


def _make_v2(root: str, own: str, name: str):
    """A v2 group with memory and pids for its children: under our own group if it can delegate
    (it holds no processes of its own), else under the root of the hierarchy (root only)."""
    for base in dict.fromkeys([os.path.join(root, own.lstrip("/")), root]):
        group = os.path.join(base, name)
        if not _make_dir(group):
            continue
        try:
            if base != root:
                _write(os.path.join(base, "cgroup.subtree_control"), "+memory +pids")
            _write(os.path.join(group, "cgroup.subtree_control"), "+memory +pids")
            return group
        except OSError:
            _rmdir(group)
    return None


def _cgroup_mounts() -> list:
    """(mount point, "cgroup" | "cgroup2", controllers) from /proc/self/mountinfo."""
    mounts = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return mounts
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = rest[2].split(",")
        mounts.append((fields[4], rest[0], [o for o in options if "=" not in o and o != "rw"]))
    return mounts


def _own_group(controllers: str) -> str:
    """Our group on the v1 hierarchy with these controllers ("" for v2), from /proc/self/cgroup."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if names == controllers or (controllers and set(controllers.split(",")) == set(names.split(","))):
                    return path
    except OSError:
        pass
    return "/"


def start_test(groups: dict, memory_bytes: int, max_processes: int) -> list:
    """Make the test's fresh group with its limits; the cgroup.procs descriptors the child writes
    "0" to (joining every hierarchy before it runs anything)."""
    procs = []
    for h in groups["hierarchies"]:
        fd = h["fd"]
        if _exists(fd) and not kill_and_remove(h):  # a leftover group is never reused
            raise OSError("the last test's cgroup still holds processes after SIGKILL and 10 s")
        os.mkdir(_TEST, 0o755, dir_fd=fd)
        if "memory" in h["controllers"]:
            if h["v2"]:
                _set(fd, "memory.max", memory_bytes)
                _set(fd, "memory.swap.max", 0, optional=True)
                _set(fd, "memory.oom.group", 1, optional=True)
            else:
                _set(fd, "memory.limit_in_bytes", memory_bytes)
                _set(fd, "memory.memsw.limit_in_bytes", memory_bytes, optional=True)
        if "pids" in h["controllers"]:
            _set(fd, "pids.max", max_processes)
        procs.append(os.open(f"{_TEST}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=fd))
    return procs


def join(procs) -> None:
    """In the child: move ourselves into the test's group on every hierarchy."""
    for fd in procs:
        os.write(fd, b"0")


def cpu_seconds(groups: dict):
    """CPU time used so far by every process of the test, or None without CPU accounting."""
    for h in groups["hierarchies"]:
        try:
            if h["v2"]:
                for line in _read_at(h["fd"], "cpu.stat").splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
            elif "cpuacct" in h["controllers"]:
                return int(_read_at(h["fd"], "cpuacct.usage")) / 1e9
        except (OSError, ValueError):
            return None
    return None


def finish_test(groups: dict, reaped: bool = False) -> dict:
    """Kill what is left of the test (nothing when the caller has `reaped` every process of it),
    read its CPU time and OOM kills, remove its group."""
    oom = False
    if not reaped:
        for h in groups["hierarchies"]:
            _kill(h)
    cpu = cpu_seconds(groups)
    for h in groups["hierarchies"]:
        if "memory" in h["controllers"]:
            name = "memory.events" if h["v2"] else "memory.oom_control"
            try:
                for line in _read_at(h["fd"], name).splitlines():
                    if line.startswith("oom_kill "):
                        oom = oom or int(line.split()[1]) > 0
            except (OSError, ValueError):
                pass
    for h in groups["hierarchies"]:
        kill_and_remove(h)
    return {"cpu": cpu, "oom": oom}


def kill_and_remove(h: dict, within: float = 10.0) -> bool:
    """Remove the test group, killing what is still in it first; retried for up to `within`
    seconds, since a killed process holds its group until its last context switch (later on a
    loaded machine). False if the group is still there."""
    deadline, pause = time.monotonic() + within, 0.001
    while True:
        try:
            os.rmdir(_TEST, dir_fd=h["fd"])
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            _kill(h)
            time.sleep(pause)
            pause = min(2 * pause, 0.05)


def close_groups(groups: dict) -> None:
    """At server exit: remove the test group, if any, and our parent groups."""
    for h in groups["hierarchies"]:
        if _exists(h["fd"]):
            kill_and_remove(h)
        os.close(h["fd"])
    for path in groups["dirs"]:
        _rmdir(path)


def _kill(h: dict) -> None:
    if not _exists(h["fd"]):
        return
    if h["v2"]:
        try:
            _set(h["fd"], "cgroup.kill", 1)
            return
        except OSError:
            pass  # before Linux 5.14: one by one
    for _ in range(100):
        try:
            pids = [int(p) for p in _read_at(h["fd"], "cgroup.procs").split()]
        except (OSError, ValueError):
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.0005)


def _exists(fd: int) -> bool:
    try:
        os.stat(_TEST, dir_fd=fd)
        return True
    except OSError:
        return False


def _set(fd: int, name: str, value, optional: bool = False) -> None:
    try:
        wfd = os.open(f"{_TEST}/{name}", os.O_WRONLY | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        if optional:
            return
        raise
    try:
        os.write(wfd, str(value).encode())
    except OSError:
        if not optional:
            raise
    finally:
        os.close(wfd)


def _read_at(fd: int, name: str) -> str:
    rfd = os.open(f"{_TEST}/{name}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=fd)
    try:
        return os.read(rfd, 1 << 16).decode()
    finally:
        os.close(rfd)


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass
