"""The syscall filter (seccomp) every program runs under: calls no judged program needs, refused
with EPERM (an error the program sees, as on a contest judge), never a kill.

The judge builds the filter once with libseccomp (through the `pyseccomp` binding), which also
emits the architecture check: a syscall of any other ABI (i386 `int 0x80`, x32) is refused too.
The fork server receives the finished BPF program and installs it in each child with prctl, after
the child's limits and before any of its code runs. `install` and `probe` are standard library
only (the fork server loads this file without importing the package, and never imports pyseccomp).
See docs/sandbox.md for the reasons behind each entry.
"""

import ctypes
import errno
import os

# name -> why it is refused. Each is refused with EPERM for every argument.
REFUSED = {
    "keyctl": "kernel keys outlive the test and can be made visible to every uid",
    "add_key": "kernel keys outlive the test",
    "request_key": "kernel keys outlive the test; it can also call out to the host's key helpers",
    "unshare": "new user, mount, cgroup or network namespaces: a cgroup2 mount sees the host",
    "setns": "entering another namespace",
    "mount": "mounts",
    "umount2": "mounts",
    "pivot_root": "mounts",
    "open_tree": "new mount API",
    "move_mount": "new mount API",
    "fsopen": "new mount API",
    "fsmount": "new mount API",
    "fsconfig": "new mount API",
    "fspick": "new mount API",
    "mount_setattr": "new mount API",
    "ptrace": "tracing another process of the same uid (a neighbour test, a leftover)",
    "process_vm_readv": "reading another process's memory",
    "process_vm_writev": "writing another process's memory",
    "bpf": "kernel programs and maps: large attack surface, no use to a solution",
    "perf_event_open": "hardware counters: side channels on the host, large attack surface",
    "userfaultfd": "stalls kernel code on a page fault: the usual exploit primitive for races",
    "io_uring_setup": "asynchronous syscalls outside this filter's view; large attack surface",
    "io_uring_enter": "io_uring",
    "io_uring_register": "io_uring",
    "open_by_handle_at": "opens files by handle, around the mount namespace",
}
# clone: refused (EPERM) when any CLONE_NEW* flag is set; its flags are its first argument
# (second on s390). clone3 passes flags in a struct no filter can read, so it answers ENOSYS and
# glibc falls back to clone, whose flags are checked. (CLONE_NEWTIME exists only for unshare and
# clone3, both closed.)
CLONE_NEW = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def build() -> tuple:
    """(BPF program bytes, note) for this machine's architecture, or (None, why not). The note
    names the syscalls this libseccomp does not know (so the kernel it was built for lacks them)."""
    if not os.uname().sysname == "Linux":
        return None, "not Linux"
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError, OSError) as e:  # RuntimeError: no libseccomp.so
        return None, f"no libseccomp binding: {type(e).__name__}: {e}"
    try:
        refuse = sc.ERRNO(errno.EPERM)
        filt = sc.SyscallFilter(sc.ALLOW)
        filt.set_attr(sc.Attr.ACT_BADARCH, refuse)  # other ABIs: refused, not killed
        unknown = [name for name in REFUSED if sc.resolve_syscall(sc.Arch.NATIVE, name) < 0]
        for name in REFUSED:
            if name not in unknown:
                filt.add_rule(refuse, name)
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        arg = 1 if os.uname().machine.startswith("s390") else 0
        for flag in CLONE_NEW.values():
            filt.add_rule(refuse, "clone", sc.Arg(arg, sc.MASKED_EQ, flag, flag))
        read, write = os.pipe()
        try:
            with os.fdopen(write, "wb") as f:
                filt.export_bpf(f)
            chunks = []
            while chunk := os.read(read, 1 << 16):
                chunks.append(chunk)
        finally:
            os.close(read)
    except OSError as e:  # libseccomp refused a rule (an old libseccomp without a syscall name)
        return None, f"libseccomp: {e}"
    program = b"".join(chunks)
    if not program or len(program) % 8:
        return None, "libseccomp exported no program"
    return program, f"unknown to libseccomp: {', '.join(unknown)}" if unknown else ""


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


def prepare(program: bytes):
    """The kernel's struct sock_fprog for `program`, built once (in the server), installed per child."""
    insns = (_Insn * (len(program) // 8)).from_buffer_copy(program)
    return _Prog(len(insns), insns), insns  # (the array kept alive with it)


def install(prepared) -> None:
    """Install the filter on this process (and so on every process it starts). Needs
    no_new_privs, or CAP_SYS_ADMIN; raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    prog = prepared[0]
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter")


def probe(prepared, keyctl_nr) -> str:
    """ "" when a throw-away child can install the filter and keyctl is then refused; else why not."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            install(prepared)
            code = 2
            if keyctl_nr is None or (
                libc.syscall(ctypes.c_long(keyctl_nr), ctypes.c_long(0), ctypes.c_long(-3), 0, 0, 0) == -1
                and ctypes.get_errno() == errno.EPERM
            ):
                code = 0
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 1)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    return {
        b"\0": "",
        b"\1": "the kernel refused the filter (no seccomp?)",
        b"\2": "installed, but keyctl was not refused",
    }.get(answer, "the probe died")
