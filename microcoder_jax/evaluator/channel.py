"""The judge's end of one program run: it makes the program's pipes, hands them to the fork server
with the request header, and does all of the program's I/O itself.

So the test's input, the code, the program's output and its status line pass only between this
process and the program: the fork server (and so every later fork of it) never holds any of them.
"""
from __future__ import annotations

import os
import select
import socket

from microcoder_jax.evaluator import worker

_HEADER = ("mode", "func_name", "timeout", "wall_timeout", "memory_mb", "output_limit")


def run_program(sock: socket.socket, request: dict) -> dict | None:
    """Run `request` (judge.py's request: code, input and limits) on the server behind `sock`.

    The server's reply (exit_code, signal, cpu, wall, killed, oom) plus stdout and status bytes;
    None when the server is gone.
    """
    code = request["code"].encode("utf-8", errors="surrogateescape")
    data = request["input"]
    data = data.encode() if isinstance(data, str) else bytes(data)
    limit = request["output_limit"]
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    st_r, st_w = os.pipe()
    code_r, code_w = os.pipe()
    mine = [in_w, out_r, st_r, code_w]
    try:
        try:
            header = {k: request[k] for k in _HEADER}
            header["harness"] = request.get("harness", "plain")  # how a stdin program is run
            worker.send_msg(sock, header, [in_r, out_w, st_w, code_r])
        finally:
            for fd in (in_r, out_w, st_w, code_r):
                os.close(fd)
        return _exchange(sock, limit, {in_w: memoryview(data), code_w: memoryview(code)},
                         out_r, st_r, mine)
    except (OSError, EOFError):
        return None
    finally:
        for fd in mine:
            try:
                os.close(fd)
            except OSError:
                pass


def _exchange(sock, limit: int, pending: dict, out_r: int, st_r: int, mine: list) -> dict | None:
    """Feed stdin and the code, collect capped stdout and status, until the server replies."""
    buffers = {out_r: [], st_r: []}
    sizes = {out_r: 0, st_r: 0}
    poller = select.poll()
    for fd in (out_r, st_r):
        os.set_blocking(fd, False)
        poller.register(fd, select.POLLIN)
    for fd, view in pending.items():
        if view:
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
                    pending[fd] = pending[fd][os.write(fd, pending[fd][:1 << 16]):]
                except BlockingIOError:
                    pass
                except BrokenPipeError:
                    pending[fd] = pending[fd][:0]
                if not pending[fd]:  # everything written, or the program closed its end
                    poller.unregister(fd)
                    _done(fd, mine)
                    del pending[fd]
            elif fd in buffers:
                if _read_some(fd, buffers, sizes, poller) > limit and not asked_to_kill:
                    worker.send_msg(sock, {"kill": "output"})
                    asked_to_kill = True
    for fd in buffers:  # every writer is dead now: what is left in the pipes, up to the cap
        while sizes[fd] <= limit and _read_some(fd, buffers, sizes, None, drain=True):
            pass
    if max(sizes.values()) > limit:
        reply["killed"] = "output"
    reply["stdout"] = b"".join(buffers[out_r])[:limit]
    reply["status"] = b"".join(buffers[st_r])[:limit]
    return reply


def _done(fd: int, mine: list) -> None:
    os.close(fd)
    mine.remove(fd)


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
