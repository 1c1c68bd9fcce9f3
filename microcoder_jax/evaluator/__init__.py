"""Judges programs on the CPU: problem schema, code extraction, comparison, sandboxed pool.

Isolation of each program (`EvaluatorPool(...).isolation` reports what the OS granted):
- Everywhere (POSIX): a fresh forked process per test in its own session/process group, killed
  whole; limits on CPU time (RLIMIT_CPU, with a wall-clock backstop), file size, open files, core
  dumps; stdout capped; a private work directory removed afterwards; a scrubbed environment;
  expected outputs never enter the program's process (comparison happens in the judge).
- Linux: memory (RLIMIT_AS). The fork servers live in new PID, network and mount namespaces: no
  network (not even loopback); the program sees only its own processes (private /proc) and
  cannot signal the server (PID 1 of the namespace); every leftover process is killed after each
  test; all filesystems are read-only except private tmpfs /tmp and /dev/shm, emptied per test.
  Paths given as `hide=` (the problem files, say) are covered by empty mounts.
- Linux as root: the program also runs as an unprivileged per-server uid (no access to root-owned
  files or the judge's memory, process count limited per uid), with no_new_privs.
- Linux without root: the same namespaces inside a user namespace where the kernel permits
  unprivileged ones (process count limited per namespace on Linux >= 5.14); the program keeps
  the user's identity, so files are protected only by the read-only mounts.
- Linux where namespaces are refused (e.g. Docker's default seccomp profile): RLIMIT_AS and, as
  root, the uid drop; leftovers are killed by process group and, as root, by the server's own
  uid (the server reaps orphans as a subreaper); network, /tmp and `hide` are not isolated.
- macOS and other POSIX: no namespaces, no memory limit (RLIMIT_AS is not enforced), no network
  isolation; a root judge still drops the program to an unprivileged uid.
- Not protected anywhere: reading files the program's identity may read (world-readable files
  as root; the user's files without root) unless hidden; the program's own inputs (not secret).
"""
from microcoder_jax.evaluator.extract import extract_code
from microcoder_jax.evaluator.judge import VERDICTS, JudgeResult, reward
from microcoder_jax.evaluator.pool import EvaluatorPool, JudgeHandle
from microcoder_jax.evaluator.problems import Problem, TestCase, load_problems

__all__ = ["EvaluatorPool", "JudgeHandle", "JudgeResult", "Problem", "TestCase", "VERDICTS",
           "extract_code", "load_problems", "reward"]
