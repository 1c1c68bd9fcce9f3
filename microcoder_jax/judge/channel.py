"""The judge's end of one program run: it makes the program's pipes, hands them to the fork server
with the request header, and does all of the program's I/O itself.

So the test's input, the code, the program's output and its status line pass only between this
process and the program: the fork server (and so every later fork of it) never holds any of them.
"""

from __future__ import annotations

import os
import select
import socket

from microcoder_jax.judge import worker

_HEADER = ("mode", "func_name", "timeout", "wall_timeout", "memory_mb", "output_limit")


def run_program(sock: socket.socket, request: dict) -> dict | None:
    """Run `request` (judge.py's request: code, input and limits) on the server behind `sock`.

    `request["input"]`: str or bytes, or an iterable of bytes chunks written as the program reads
    them (a checker's input is made from a spooled output, never held whole).
    The server's reply (exit_code, signal, cpu, wall, killed, oom) plus the status bytes (at
    most `status_limit`) and stdout: fed as it arrives to a fresh `request["stdout_sink"]()`
    where there is one (its `finish()` is then reply["stdout_sink"] and only the first
    `request["stdout_keep"]` bytes are kept, default none), else the bytes themselves (at most
    `output_limit`); reply["stdout_size"] counts every byte the program wrote. reply["overflow"]
    names the pipe that went over its cap ("stdout" or "status"; the program is killed). None
    when the server is gone.
    """
    code = request["code"].encode("utf-8", errors="surrogateescape")
    data = request["input"]
    if isinstance(data, str):
        data = [data.encode()]
    elif isinstance(data, (bytes, bytearray, memoryview)):
        data = [bytes(data)]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    code_r, code_w = os.pipe()
    mine = [in_w, out_r, st_r, code_w]
    make_sink = request.get("stdout_sink")
    outputs = {
        out_r: _Output(request["output_limit"], make_sink() if make_sink else None, request.get("stdout_keep", 0)),
        st_r: _Output(request.get("status_limit", request["output_limit"]), None),
    }
    try:
        try:
            header = {k: request[k] for k in _HEADER}
            header["harness"] = request.get("harness", "plain")  # how a stdin program is run
            header["return_limit"] = request.get("return_limit", request["output_limit"])
            worker.send_msg(sock, header, [in_r, out_w, st_w, code_r])
        finally:
            for fd in (in_r, out_w, st_w, code_r):
                os.close(fd)
        reply = _exchange(sock, {in_w: _Input(data), code_w: _Input([code])}, outputs, mine)
    except (OSError, EOFError):
        return None
    finally:
        for fd in mine:
            try:
                os.close(fd)
            except OSError:
                pass
    if reply is None:
        return None
    out, status = outputs[out_r], outputs[st_r]
    over = [name for name, o in (("stdout", out), ("status", status)) if o.over]
    if over:
        reply["killed"], reply["overflow"] = "output", over[0]
    reply["status"] = status.value()
    if out.sink is not None:
        reply["stdout"], reply["stdout_sink"] = out.head, out.sink.finish()
    else:
        reply["stdout"] = out.value()
    reply["stdout_size"] = out.size
    return reply


class _Output:
    """One pipe from the program: its bytes up to `limit`, kept or fed to `sink` (then only the
    first `keep` bytes are kept, `head`); past the limit only counted (the program is then killed)."""

    def __init__(self, limit: int, sink, keep: int = 0):
        self.limit, self.sink, self.size, self.keep = limit, sink, 0, keep
        self.head = b""
        self._chunks: list = []

    @property
    def over(self) -> bool:
        return self.size > self.limit

    def add(self, chunk: bytes) -> None:
        room = self.limit - self.size
        self.size += len(chunk)
        if room <= 0:
            return
        chunk = chunk[:room] if len(chunk) > room else chunk
        if self.sink is not None:
            if len(self.head) < self.keep:
                self.head += chunk[: self.keep - len(self.head)]
            self.sink.feed(chunk)
        else:
            self._chunks.append(chunk)

    def value(self) -> bytes:
        return b"".join(self._chunks)


_CHUNK = 1 << 16  # a pipe's default capacity: one read, at most this much held per pipe


class _Input:
    """Bytes for one of the program's pipes, drawn from an iterable of chunks as the pipe takes them."""

    def __init__(self, chunks):
        self._chunks, self._view = iter(chunks), memoryview(b"")

    @property
    def done(self) -> bool:
        """Nothing left to write (the next chunk is drawn here)."""
        while not self._view:
            chunk = next(self._chunks, None)
            if chunk is None:
                return True
            self._view = memoryview(chunk)
        return False

    def write(self, fd: int) -> None:
        """Write what the pipe takes now (BlockingIOError when it takes nothing)."""
        if not self.done:
            self._view = self._view[os.write(fd, self._view[:_CHUNK]) :]

    def drop(self) -> None:
        """The reader is gone: nothing more is written (or drawn)."""
        self._chunks, self._view = iter(()), memoryview(b"")


def _exchange(sock, pending: dict, outputs: dict, mine: list) -> dict | None:
    """Feed stdin and the code, collect capped stdout and status, until the server replies."""
    poller = select.poll()
    for fd in outputs:
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    for fd, feed in pending.items():
        if not feed.done:
            os.set_blocking(fd, False)
            poller.register(fd, select.POLLOUT)
        else:
            _done(fd, mine)
    poller.register(sock.fileno(), select.POLLIN)
    reply, asked_to_kill = None, False
    while reply is None:
        for fd, _ in poller.poll():
            if fd == sock.fileno():
                reply = worker.recv_msg(sock)
                if reply is None:
                    return None
            elif fd in pending:
                try:
                    pending[fd].write(fd)
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    pending[fd].drop()
                if pending[fd].done:  # everything written, or the program closed its end
                    poller.unregister(fd)
                    _done(fd, mine)
                    del pending[fd]
            elif fd in outputs:
                if _read_some(fd, outputs[fd], poller) and outputs[fd].over and not asked_to_kill:
                    worker.send_msg(sock, {"kill": "output"})
                    asked_to_kill = True
    for fd, out in outputs.items():  # every writer is dead now: what is left in the pipes
        while not out.over and _read_some(fd, out, None):
            pass
    return reply


def _done(fd: int, mine: list) -> None:
    os.close(fd)
    mine.remove(fd)


def _read_some(fd: int, out: _Output, poller) -> bool:
    """Read one chunk from `fd` into `out`; False when there was nothing (drained, or EOF)."""
    try:
        chunk = os.read(fd, _CHUNK)
    except BlockingIOError:
        return False
    if not chunk:
        if poller is not None:
            poller.unregister(fd)
        return False
    out.add(chunk)
    return True
