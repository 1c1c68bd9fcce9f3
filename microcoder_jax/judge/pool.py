"""A pool of warm fork servers that judges batches in the background.

`pool.submit(problems, codes)` returns a handle at once; one judging thread per fork server takes
(problem, program) jobs in submission order, so judging overlaps with training and several handles
may be in flight. The threads spend their time blocked on pipes; only comparisons hold the GIL.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Iterator, Sequence, cast

from microcoder_jax.judge import cgroups, channel, syscall_filter, worker
from microcoder_jax.judge.program import JudgeResult, Limits, judge, judge_error
from microcoder_jax.data.problems import Problem

log = logging.getLogger(__name__)

_UID_BASE = 1_000_000_000  # sandbox uids: far above any login or systemd dynamic user
_POOL_IDS = itertools.count()
_FALLBACK_UID = 65534  # nobody, where large uids are not mapped (containers)


class _Server:
    """One fork server process, restarted if it dies."""

    def __init__(self, uid: int, options: dict, tmp_parent: str | None, start: bool = True, retries: int = 2):
        self._uid = uid
        self._retries = retries  # fresh servers a request is retried on after its server died
        self._options = options  # the worker's config (see worker.main), less uids and tmpdir
        self._tmp_parent = tmp_parent
        self._proc = None
        self.isolation: dict = {}
        self.keyring_failures = 0  # tests after which the sandbox uid's keyrings were not cleared
        self.deaths = 0  # times this slot's server died under a program
        if start:
            self._start()

    def _start(self) -> None:
        self._spawn()
        self._handshake()

    def _spawn(self) -> None:
        self._tmp = tempfile.mkdtemp(prefix="mcj-judge-", dir=self._tmp_parent)
        config = {"uids": [self._uid, _FALLBACK_UID], "tmpdir": self._tmp, **self._options}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        self._sock, theirs = worker.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", worker.__file__],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=env,
            )
        finally:
            theirs.close()
        worker.send_msg(self._sock, config)  # on the socket: argv would show it in /proc

    def _handshake(self) -> None:
        try:
            hello = worker.recv_msg(self._sock)
        except (OSError, EOFError):
            hello = None
        if not hello or "hello" not in hello:
            raise RuntimeError("the judge's fork server did not start")
        self.isolation = hello["hello"]

    def run(self, request: dict) -> dict:
        """One request. A server found dead is replaced first; one that dies under the request is
        replaced and the request retried on the fresh one, at most `retries` times, then the
        reply is {"server_died": [how each died], "program_blamed": bool} (see `_blame`)."""
        deaths: list[str] = []
        while len(deaths) <= self._retries:
            if self._proc is not None and self._proc.poll() is not None:  # died between programs
                log.warning("judge fork server %s between programs; replacing it", self._died())
                self.close()
            if self._proc is None:
                try:
                    self._start()
                except RuntimeError:  # killed while it started: as a death under the request
                    deaths.append(f"a fresh server did not start ({self._died()})")
                    self.close()
                    continue
            assert self._proc is not None  # _start spawned it or raised
            reply = channel.run_program(self._sock, request)
            if reply is not None and reply.get("keyrings_not_cleared"):
                self.keyring_failures += 1
                log.warning(
                    "the judge could not clear the sandbox uid's keyrings after a test (%d so far on this server)",
                    self.keyring_failures,
                )
            if reply is not None:
                return reply
            deaths.append(self._died())
            self.deaths += 1
            log.warning("judge fork server died under a program (%s); replacing it", deaths[-1])
            self.close()
        return {"server_died": deaths, "program_blamed": _blame(self.isolation)}

    def _died(self) -> str:
        """How the (dead or dying) server ended, reaped: 'killed by SIGKILL' or 'exit code N'."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # its socket broke but it lives: it is of no more use
            self._proc.kill()
            return f"pid {self._proc.pid} stopped answering (killed)"
        if code < 0:
            return f"pid {self._proc.pid} killed by {_signal_name(-code)}"
        if code > 128:  # isolation.py's outer process passes on its namespace init's death
            return f"pid {self._proc.pid}'s PID-namespace init killed by {_signal_name(256 - code)}"
        return f"pid {self._proc.pid} exit code {code}"

    def close(self) -> None:
        if self._proc is None:
            return
        self._sock.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        for group in self.isolation.get("cgroup_dirs", ()):  # a server that was killed leaves its own
            _remove_group(group, self.isolation.get("cgroup") == 2)
        shutil.rmtree(self._tmp, ignore_errors=True)


class JudgeHandle:
    """Results of one `submit`, filled in by the pool's threads."""

    def __init__(self, size: int):
        self._results: list[JudgeResult | None] = [None] * size
        self._left = size
        self._cond = threading.Condition()
        self._finished: list[int] = []

    def _set(self, index: int, result: JudgeResult) -> None:
        with self._cond:
            self._results[index] = result
            self._left -= 1
            self._finished.append(index)
            self._cond.notify_all()

    def done(self) -> bool:
        with self._cond:
            return self._left == 0

    @property
    def completed(self) -> int:
        with self._cond:
            return len(self._results) - self._left

    def result(self, timeout: float | None = None) -> list[JudgeResult]:
        """Block until every result is in (TimeoutError after `timeout` seconds)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._left == 0, timeout):
                raise TimeoutError(f"{self._left} of {len(self._results)} programs still being judged")
            return cast("list[JudgeResult]", list(self._results))  # none left unset

    def as_completed(self) -> Iterator[tuple[int, JudgeResult]]:
        """(index, result) pairs in completion order, as they arrive."""
        seen = 0
        while seen < len(self._results):
            with self._cond:
                self._cond.wait_for(lambda seen=seen: len(self._finished) > seen)
                batch = self._finished[seen:]
            for index in batch:
                yield index, cast(JudgeResult, self._results[index])  # set before it was finished
            seen += len(batch)


class JudgePool:
    """Judges (problem, program) pairs on `workers` warm fork servers (default: one per core).

    timeout: CPU seconds per test (a problem may override it with `metadata["timeout"]`);
    memory_mb: memory limit per program (resident memory in its cgroup, else address space);
    output_limit_mb: stdout cap per test; wall_factor: wall-clock backstop = timeout *
    wall_factor + 1 s; max_processes: processes and threads per program (its cgroup, or where a
    sandbox uid or user namespace makes RLIMIT_NPROC count only its own); tmpfs_mb: size of each
    server's private /tmp and /dev/shm (Linux, where mount namespaces are allowed); tmpdir: where
    the servers' roots, or work directories without them, are made; hide: files or directories
    programs must not read even where there is no minimal root, such as the problem files with
    expected outputs (covered in the servers' mount namespaces); namespaces=False and
    cgroups=False skip those (debugging, or to see what hosts refusing them get), and
    seccomp=False and program_net_ns=False the syscall filter and the network namespace of each
    program (to measure what they cost). server_retries: fresh fork servers a test is retried
    on when its server dies under it (killed from outside: the OOM killer, an operator); past
    that the program's verdict is judge_error (left out of rewards), not the program's failure.
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout: float = 6.0,
        memory_mb: int = 1024,
        *,
        output_limit_mb: int = 64,
        wall_factor: float = 3.0,
        max_processes: int = 64,
        tmpfs_mb: int = 256,
        tmpdir: str | None = None,
        hide: Sequence[str] = (),
        namespaces: bool = True,
        cgroups: bool = True,
        seccomp: bool = True,
        program_net_ns: bool = True,
        server_retries: int = 2,
    ):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.workers = workers or cores or 1
        self.limits = Limits(timeout, memory_mb, output_limit_mb, wall_factor)
        if server_retries < 0:
            raise ValueError(f"server_retries must be >= 0, got {server_retries}")
        self._retries = server_retries
        self._closed = False
        program, note = syscall_filter.build() if seccomp else (None, "turned off (seccomp=False)")
        if program is None:
            log.warning("judged programs run without a syscall filter: %s", note)
        self._options = {
            "max_processes": max_processes,
            "tmpfs_mb": tmpfs_mb,
            "namespaces": namespaces,
            "cgroups": cgroups,
            "hide": [os.path.abspath(p) for p in hide],
            "program_net_ns": program_net_ns,
            "seccomp": program.hex() if program else None,
            "seccomp_note": note,
        }
        self._tmpdir = tmpdir or _default_tmpdir()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        # Distinct uids per server and per pool, so no two programs running at once share one
        # (process limits count per uid).
        base = _UID_BASE + (os.getpid() * 31 + next(_POOL_IDS)) % 500_000 * 4096
        self._servers = [
            _Server(base + i, self._options, self._tmpdir, start=False, retries=server_retries)
            for i in range(self.workers)
        ]
        try:
            for server in self._servers:  # start them all at once, then wait for each to be ready
                server._spawn()
            for server in self._servers:
                server._handshake()
        except BaseException:
            for server in self._servers:
                server.close()
            raise
        self._checkers: list[_Server | None] = [None] * self.workers
        self._threads = [
            threading.Thread(target=self._loop, args=(i,), daemon=True, name=f"judge-{i}") for i in range(self.workers)
        ]
        for t in self._threads:
            t.start()

    @property
    def isolation(self) -> dict:
        """What the OS granted (see the package docstring): namespaces (pid_ns, net_ns, mount_ns,
        ipc_ns, user_ns), minimal_root, readonly_root, private_tmp, private_proc, hidden, the
        sandbox uid (None: none), cgroup (1, 2 or None) with cgroup_controllers and cgroup_dirs,
        keyring (fresh session keyrings per program), program_net_ns (a network namespace per
        program), seccomp (the syscall filter of syscall_filter.py) and seccomp_note (why not,
        or the syscalls this libseccomp does not know)."""
        return dict(self._servers[0].isolation)

    @property
    def keyring_failures(self) -> int:
        """Tests after which a server could not clear its sandbox uid's keyrings (logged too)."""
        return sum(s.keyring_failures for s in [*self._servers, *self._checkers] if s is not None)

    @property
    def server_deaths(self) -> int:
        """Times a fork server (a program's or a checker's) died under a request and was replaced."""
        return sum(s.deaths for s in [*self._servers, *self._checkers] if s is not None)

    @property
    def server_pids(self) -> list[int]:
        return [s._proc.pid for s in self._servers if s._proc is not None]

    @property
    def sandbox_uids(self) -> list[int]:
        """The uids programs run as (empty when the OS gives us none)."""
        return [s.isolation["uid"] for s in self._servers if s.isolation.get("uid") is not None]

    def submit(
        self,
        problems: Sequence[Problem],
        codes: Sequence[str | None],
        *,
        every_test: bool = False,
        show_output: int = 0,
    ) -> JudgeHandle:
        """Queue the pairs (problems[i], codes[i]) and return at once. None code = no_code.
        `every_test`: run all of a problem's tests, not only up to the first failure.
        `show_output`: keep that many characters of the first failing test's output."""
        if len(problems) != len(codes):
            raise ValueError(f"{len(problems)} problems but {len(codes)} programs")
        if self._closed:
            raise RuntimeError("the pool is closed")
        handle = JudgeHandle(len(codes))
        if not codes:
            return handle
        for index, (problem, code) in enumerate(zip(problems, codes)):
            self._jobs.put((handle, index, problem, code, every_test, show_output))
        return handle

    def judge(
        self,
        problems: Sequence[Problem],
        codes: Sequence[str | None],
        *,
        every_test: bool = False,
        show_output: int = 0,
    ) -> list[JudgeResult]:
        return self.submit(problems, codes, every_test=every_test, show_output=show_output).result()

    def _loop(self, slot: int) -> None:
        while (job := self._jobs.get()) is not None:
            handle, index, problem, code, every_test, show_output = job
            try:
                result = judge(
                    problem,
                    code,
                    self._servers[slot].run,
                    self.limits,
                    every_test=every_test,
                    run_checker=lambda req: self._checker(slot).run(req),
                    show_output=show_output,
                )
            except Exception as e:  # noqa: BLE001 - one bad pair never stops the pool
                log.exception("judging %s failed", getattr(problem, "question_id", "?"))
                result = judge_error(problem, f"{type(e).__name__}: {e}")
            handle._set(index, result)

    def _checker(self, slot: int) -> _Server:
        """Checkers run on their own fork servers, with their own uids: what a checker sees (the
        expected output) never passes a program's server or a process a program could signal."""
        checker = self._checkers[slot]
        if checker is None:
            uid = self._servers[slot]._uid + self.workers
            checker = self._checkers[slot] = _Server(uid, self._options, self._tmpdir, retries=self._retries)
        return checker

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:  # jobs nobody started: answered, not run
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0]._set(job[1], judge_error(job[2], "the pool was closed before judging this"))
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join()
        for server in [*self._servers, *self._checkers]:
            if server is not None:
                server.close()

    def __enter__(self) -> "JudgePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


def _blame(isolation: dict) -> bool:
    """Whether a program could have killed its fork server itself: only where it runs as the
    server's own uid and outside a PID namespace (the init of a PID namespace ignores SIGKILL
    from inside it, and no uid may signal another's processes). Elsewhere a dead server was
    killed from outside (the OOM killer, an operator) or failed by itself: never the program."""
    return not isolation.get("pid_ns") and isolation.get("uid") is None


def _remove_group(group: str, v2: bool) -> None:
    """Remove a server's cgroup and its test group, killing what a killed server left running."""
    try:
        fd = os.open(group, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # the server removed it at its exit
    try:
        cgroups.kill_and_remove({"fd": fd, "v2": v2})
    finally:
        os.close(fd)
    try:
        os.rmdir(group)
    except OSError:
        pass


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _default_tmpdir() -> str | None:
    """tmpfs when there is one (work directories cost nothing there), else the system default."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None
