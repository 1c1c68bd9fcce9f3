"""Isolation the fork server sets up once, at start-up, before it forks any program.

Linux: new mount, PID and network namespaces (inside a new user namespace when not root), a
minimal read-only root (pivot_root) with private tmpfs scratch space and a private /proc; a
sandbox uid for the children when root; a process limit where it counts only their processes.
Elsewhere: nothing here applies, and the children get only resource limits (see sandbox.py).
"""

import ctypes
import os
import re
import signal
import sys

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_CLONE_NEWIPC, _MNT_DETACH = 0x08000000, 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
SCRATCH = ("/tmp", "/dev/shm")  # world-writable scratch space; private and emptied per run when we can
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_LINUX = sys.platform.startswith("linux")
_LIBC = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None


def isolate(tmpfs_mb: int, namespaces: bool = True, hide=(), new_root: str | None = None) -> dict:
    """Enter new mount, PID, network and IPC namespaces (as PID 1 of the new PID one) where permitted.

    In the new mount namespace the server moves into a minimal read-only root built in
    `new_root` (see `_build_root`), with fresh size-limited tmpfs /tmp and /dev/shm and a /proc
    that shows only our own processes; paths in `hide` that are still visible there are covered.
    Where pivot_root is refused, every filesystem is remounted read-only instead.
    Not root: the same inside a new user namespace, when the kernel allows unprivileged ones.
    """
    report = {
        "pid_ns": False,
        "net_ns": False,
        "user_ns": False,
        "mount_ns": False,
        "ipc_ns": False,
        "program_net_ns": False,
        "minimal_root": False,
        "readonly_root": False,
        "private_tmp": False,
        "private_proc": False,
        "hidden": 0,
        "skeleton": [],
    }
    if not (_LINUX and namespaces):
        return report
    root, uid, gid = os.geteuid() == 0, os.getuid(), os.getgid()  # (read before unshare)
    if not root and not _user_namespace_works():
        return report  # e.g. AppArmor's restriction on Ubuntu >= 23.10: half a namespace is worse
    everything = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWNET
    for flags in (everything, _CLONE_NEWPID | _CLONE_NEWNET, _CLONE_NEWNET):
        flags |= 0 if root else _CLONE_NEWUSER
        if _LIBC.unshare(flags) == 0:
            break
    else:
        return report
    if not root:
        report["user_ns"] = _map_ids(uid, gid)
        if not report["user_ns"]:  # cannot happen after a good probe; never run half-mapped
            raise OSError("user namespace without an id map")
    report["net_ns"] = True
    if flags & _CLONE_NEWPID:
        child = os.fork()  # the first child is PID 1 of the new namespace: the real server
        if child:
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGKILL))
            _, status = os.waitpid(child, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        report["pid_ns"] = os.getpid() == 1
    if flags & _CLONE_NEWNS and _mount(None, "/", None, _MS_REC | _MS_PRIVATE):
        report["mount_ns"] = True  # from here on, nothing we mount is seen outside
        hide = [os.path.realpath(p) for p in hide]
        if new_root is not None and _build_root(new_root, tmpfs_mb, report):
            report["minimal_root"] = report["readonly_root"] = report["private_tmp"] = True
        else:
            report["private_tmp"] = all(
                _mount("tmpfs", d, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmpfs_mb}m,mode=1777")
                for d in SCRATCH
                if os.path.isdir(d)
            )
            if report["private_tmp"]:  # work directories live there, so the rest may go read-only
                report["readonly_root"] = _remount_readonly()
            if report["pid_ns"]:
                report["private_proc"] = _mount_proc("/proc")
        report["hidden"] = sum(not os.path.lexists(p) or _cover(p) for p in hide)
    report["ipc_ns"] = _namespace_works(_CLONE_NEWIPC)  # each program gets its own (sandbox.py)
    report["program_net_ns"] = _namespace_works(_CLONE_NEWNET)  # and its own network namespace
    return report


def _mount_proc(target: str) -> bool:
    return _mount("proc", target, "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _namespace_works(flags: int) -> bool:
    """Whether a child may unshare these namespaces (tried in a throw-away child)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if _LIBC.unshare(flags) == 0 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _build_root(new_root: str, tmpfs_mb: int, report: dict) -> bool:
    """pivot_root into a tmpfs holding only what the interpreter needs, bound read-only: the
    system's /usr and library directories, the dynamic loader's cache, and the judge's Python
    (its prefixes and import paths, wherever they live: a venv under /tmp included). Nothing else
    of the host is reachable from there: no judge file or result, no socket, no other path."""
    if not _mount("tmpfs", new_root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755"):
        return False
    binds, in_scratch = [], []
    for path in _interpreter_paths():
        (in_scratch if any(_under(path, d) for d in SCRATCH) else binds).append(path)
    try:
        for path in binds:
            _place(path, new_root)
        for d in ("proc", "dev", "tmp", "dev/shm"):
            os.makedirs(new_root + "/" + d, mode=0o755, exist_ok=True)
        for d in SCRATCH:
            if not _mount("tmpfs", new_root + d, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmpfs_mb}m,mode=1777"):
                raise OSError(f"tmpfs on {d}")
        for path in in_scratch:  # mount points inside the private /tmp: cleanup leaves them be
            _place(path, new_root)
            report["skeleton"].append(path)
        for name in ("null", "zero", "full", "random", "urandom"):
            _place("/dev/" + name, new_root)
        # Our own /proc, mounted while the host's is still in view (which a user namespace requires).
        report["private_proc"] = report["pid_ns"] and _mount_proc(new_root + "/proc")
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, f"{new_root}/dev/{name}")
        os.chdir(new_root)
        if not _pivot_root():
            raise OSError("pivot_root")
        os.chdir("/")
    except OSError:
        os.chdir("/")
        _LIBC.umount2(new_root.encode(), _MNT_DETACH)
        return False
    return _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _interpreter_paths() -> list:
    """Host paths a program's interpreter reads: system libraries and the judge's Python, less
    the judge's own source: the fork server's script directory, and a source checkout on sys.path
    (an editable install: the whole project, data and results included; site-packages stays)."""
    own = os.path.dirname(os.path.abspath(__file__))
    package = os.path.basename(os.path.dirname(own))  # microcoder_jax
    paths = [
        "/usr",
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32",
        "/bin",
        "/sbin",
        "/etc/ld.so.cache",
        "/etc/localtime",
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
    ]
    paths += [
        p
        for p in sys.path
        if p
        and os.path.abspath(p) != own
        and not (
            os.path.isdir(os.path.join(p, package))
            and os.path.basename(os.path.abspath(p)) not in ("site-packages", "dist-packages")
        )
    ]
    kept = []
    for path in sorted({os.path.abspath(p) for p in paths if os.path.lexists(p)}, key=len):
        if path != "/" and not any(_under(path, k) for k in kept):
            kept.append(path)
    return kept


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _place(path: str, new_root: str) -> None:
    """Bind `path` read-only at the same place under `new_root` (a top-level symlink such as
    /lib -> usr/lib stays a symlink)."""
    target = new_root + path
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if os.path.islink(path) and os.path.dirname(path) == "/":
        os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, mode=0o755, exist_ok=True)
    elif not os.path.exists(target):
        open(target, "w").close()
    if not (
        _mount(path, target, None, _MS_BIND | _MS_REC)
        and _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _mount_flags(target))
    ):
        raise OSError(f"bind {path}")


def _pivot_root() -> bool:
    """pivot_root(".", ".") then detach the old root: no path of the host is left beneath us."""
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        return False
    if _LIBC.syscall(ctypes.c_long(number), b".", b".") != 0:
        return False
    return _LIBC.umount2(b".", _MNT_DETACH) == 0


def _map_ids(uid: int, gid: int) -> bool:
    """Map ourselves to root of the new user namespace (our ids outside)."""
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"0 {uid} 1")
        _write("/proc/self/gid_map", f"0 {gid} 1")
    except OSError:
        return False
    return True


def _user_namespace_works() -> bool:
    """Try, in a throw-away child, what an unprivileged server needs: a mapped user namespace in
    which it may mount. Some kernels allow the unshare but deny the map or the mounts."""
    uid, gid = os.getuid(), os.getgid()
    pid = os.fork()
    if pid == 0:
        ok = (
            _LIBC.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) == 0
            and _map_ids(uid, gid)
            and _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        )
        os._exit(0 if ok else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _cover(path: str) -> bool:
    """Hide a directory under an empty read-only tmpfs, or a file under /dev/null."""
    path = os.path.realpath(path)
    if os.path.isdir(path):
        return _mount("tmpfs", path, "tmpfs", _MS_RDONLY | _MS_NOSUID | _MS_NODEV, "size=4k,mode=0555")
    if os.path.exists(path):
        return _mount("/dev/null", path, None, _MS_BIND)
    return False


def _remount_readonly() -> bool:
    """Every filesystem mount read-only in our namespace (kernel and device mounts excepted)."""
    with open("/proc/self/mountinfo") as f:
        points = [_unescape(line.split()[4]) for line in f]
    skip = ("/proc", "/sys", "/dev", *SCRATCH)
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
    pairs = [
        (os.ST_NOSUID, _MS_NOSUID),
        (os.ST_NODEV, _MS_NODEV),
        (os.ST_NOEXEC, _MS_NOEXEC),
        (os.ST_NOATIME, 1024),
        (os.ST_NODIRATIME, 2048),
        (os.ST_RELATIME, 1 << 21),
    ]
    return sum(ms for st_flag, ms in pairs if st & st_flag)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def probe_uid(candidates) -> int | None:
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


def become_subreaper() -> bool:
    """Orphans of our children come to us, not to the host's init (which may never reap them)."""
    return _LINUX and _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def process_limit(report: dict, max_processes: int) -> int | None:
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
