"""``broker serve``'s Unix socket: owner-only, the peer's uid checked, one question per
connection.

Synopsis::

    async with trio.open_nursery() as nursery:
        path = await nursery.start(serve_socket, "/run/user/1000/broker/serve.sock", service)

The socket's folder is made ``0700`` (an existing one must be the service user's and open to
no one else), the socket ``0600``; a stale socket left by a service that died is replaced, a
live one is refused by name. Each connection carries one question line and gets one reply
line; a peer whose uid is not the service's (root excepted) gets a refusal and nothing is
asked. A peer that goes away while its question waits (the agent killed its hook) aborts the
question, so a late answer decides nothing.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
import struct
from typing import TYPE_CHECKING

import trio

from .._errors import BrokerError
from .._signal import AbortSignal
from ._wire import MAX_FRAME, FrameError, error_line, read_question, reply_line

if TYPE_CHECKING:
    from ._service import ApprovalService

__all__ = ["SocketError", "serve_socket"]

log = logging.getLogger("broker.serve")

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class SocketError(BrokerError, OSError):
    """The service's socket cannot be made where asked (the message names why and the fix)."""


def _prepare(path: str) -> None:
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.stat(folder)
    except OSError as exc:
        raise SocketError(
            f"cannot make the socket's folder {folder} ({exc.strerror}): pass --socket PATH "
            "in a folder you own"
        ) from None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise SocketError(
            f"the socket's folder {folder} must be yours and closed to others (chmod 700 "
            f"{folder}), found owner uid {info.st_uid} and mode {stat.S_IMODE(info.st_mode):o}"
        )
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise SocketError(f"{path} exists and is not a socket: remove it or pass another --socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise
        os.unlink(path)  # left by a service that is gone
    else:
        raise SocketError(
            f"another broker serve is listening on {path}: stop it, or pass another --socket"
        )
    finally:
        probe.close()


def peer_uid(stream: trio.SocketStream) -> int:
    """The uid of the process at the other end of *stream* (``SO_PEERCRED``)."""
    raw = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    return int(_CRED.unpack(raw)[1])


async def serve_socket(
    path: str,
    service: ApprovalService,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on *path* and answer each connection's question with *service*, until
    cancelled; started reports the path. Cancellation: stops listening, cancels the
    connections in flight (their questions settle ``cancelled``), removes the socket."""
    _prepare(path)
    listener_socket = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        await listener_socket.bind(path)
    finally:
        os.umask(old)
    try:
        os.chmod(path, 0o600)
        listener_socket.listen(128)
        listener = trio.SocketListener(listener_socket)
        async with trio.open_nursery() as nursery:
            task_status.started(path)
            while True:
                stream = await listener.accept()
                nursery.start_soon(_contained, stream, service)
    finally:
        listener_socket.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


async def _read_line(stream: trio.SocketStream) -> bytes | None:
    received = bytearray()
    while True:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        received += chunk
        if b"\n" in received:
            return bytes(received[: received.index(b"\n")])
        if len(received) > MAX_FRAME + 1:
            raise FrameError(f"a question is at most {MAX_FRAME} bytes")


async def _contained(stream: trio.SocketStream, service: ApprovalService) -> None:
    """One connection, its failures contained: a peer that resets, a question that breaks
    something unforeseen, is logged and ends that connection (its hook refuses: it read no
    answer), never the service."""
    await trio.lowlevel.checkpoint()
    try:
        await _connection(stream, service)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        log.info("a hook's connection broke before its answer was sent")
    except Exception:
        log.exception("a hook's question failed; its connection is closed (the hook refuses)")


async def _connection(stream: trio.SocketStream, service: ApprovalService) -> None:
    async with stream:
        uid = peer_uid(stream)
        if uid not in (os.getuid(), 0):
            why = f"refused: uid {uid} is not the service's user; run the hook as uid {os.getuid()}"
            await stream.send_all(error_line(why))
            return
        try:
            with trio.fail_after(30):
                line = await _read_line(stream)
            if line is None:
                return
            question = read_question(line)
        except (FrameError, trio.TooSlowError) as exc:
            why = "no question within 30 s" if isinstance(exc, trio.TooSlowError) else str(exc)
            await stream.send_all(error_line(f"refused: {why}"))
            return
        signal = AbortSignal()
        async with trio.open_nursery() as watching:

            async def went_away() -> None:
                # Anything more, or the end: the hook is gone (it sends one line, then waits);
                # a reset is gone all the same.
                await trio.lowlevel.checkpoint()
                with contextlib.suppress(trio.BrokenResourceError):
                    await stream.receive_some(1)
                signal.abort("the hook process went away (the agent's hook timeout?)")

            watching.start_soon(went_away)
            if question.timeout_ms is not None:
                watching.start_soon(_abort_after, signal, question.timeout_ms / 1000)
            try:
                reply = await service.decide(question, signal)
                line_out = reply_line(reply)
            except (BrokerError, ValueError) as exc:
                line_out = error_line(f"the service could not ask: {exc}")
            watching.cancel_scope.cancel()
        # The hook may have gone away: its question was aborted, there is no one to tell.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(line_out)


async def _abort_after(signal: AbortSignal, seconds: float) -> None:
    # A little before the hook gives up, so its last word is the service's, not its own.
    await trio.sleep(max(0.0, seconds - 0.5))
    signal.abort("the hook's timeout")
