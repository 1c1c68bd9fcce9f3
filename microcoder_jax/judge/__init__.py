"""Judges programs on the CPU: problem schema, code extraction, comparison, sandboxed pool.

Isolation of each program (`JudgePool(...).isolation` reports what the OS granted):
- Everywhere (POSIX): a fresh forked process per test in its own session/process group, killed
  whole; CPU time measured by the fork server (RLIMIT_CPU only as a backstop above the limit,
  plus a wall-clock backstop); limits on file size, open files, core dumps; stdout capped; a
  private work directory removed afterwards; a scrubbed environment. The fork server is a
  zygote: the judge hands each program its pipes (SCM_RIGHTS) and does all its I/O, so no test
  input, expected output or earlier output is ever in the server, or in any fork of it.
- Linux: the fork servers live in new PID, network and mount namespaces: no network (not even
  loopback or abstract sockets); a minimal read-only root (pivot_root) holding only /usr, the
  library directories, the loader cache and the judge's Python wherever it lives (a venv under
  /tmp included), with private /tmp and /dev/shm (emptied per test), a minimal /dev and a /proc
  of its own: no judge file, result, host socket or other path is reachable. Each program gets
  its own IPC and network namespaces (SysV and POSIX IPC and abstract sockets die with the test)
  and a fresh session keyring, and runs under a seccomp filter (syscall_filter.py, built with
  libseccomp where pyseccomp and libseccomp2 are installed) that refuses with EPERM kernel keys,
  namespaces, mounts, ptrace, bpf, perf events, userfaultfd and io_uring; user keyrings are also
  emptied after each test (failures logged and counted). Where the machine has cgroups (v2, or v1
  memory/pids/cpuacct hierarchies) and we may write there: a fresh group per test, so CPU of
  every process is counted, memory is limited as resident memory and processes by count; the
  group is killed and removed after the test. Without cgroups: RLIMIT_AS (address space).
- Linux as root: the program also runs as an unprivileged per-server uid, with no_new_privs.
- Linux without root: the same namespaces inside a user namespace where the kernel permits
  unprivileged ones (process count limited per namespace on Linux >= 5.14); the program keeps the
  user's identity but none of the namespace's capabilities; no cgroups (rlimits instead).
- Linux where namespaces are refused (e.g. Docker's default seccomp profile): limits and, as
  root, the uid drop; leftovers are killed by process group and, as root, by the server's own
  uid; network, IPC, /tmp and `hide` are not isolated.
- macOS and other POSIX: no namespaces, no memory limit (RLIMIT_AS is not enforced), no network
  isolation; a root judge still drops the program to an unprivileged uid.
- Output: stdout is compared as it arrives, in bounded memory (compare.StdoutMatcher); with
  `show_output=N` (feedback) only its first N characters are kept besides. A call-based return
  value over 1 MiB is an output-limit runtime_error.
- Not protected anywhere: the program's own inputs (not secret); without a minimal root, files
  the program's identity may read unless hidden.
"""

from microcoder_jax.judge.extract import extract_code
from microcoder_jax.judge.program import VERDICTS, JudgeResult
from microcoder_jax.judge.pool import JudgePool, JudgeHandle
from microcoder_jax.data.problems import Problem, TestCase, load_problems

__all__ = [
    "JudgePool",
    "JudgeHandle",
    "JudgeResult",
    "Problem",
    "TestCase",
    "VERDICTS",
    "extract_code",
    "load_problems",
]
