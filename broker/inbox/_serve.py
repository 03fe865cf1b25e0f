"""``serve_inbox``: the inbox as a task of the caller's nursery, served by Hypercorn on trio.

Synopsis::

    async with open_broker(store="logs/sessions.sqlite") as broker, trio.open_nursery() as n:
        port = await n.start(partial(serve_inbox, broker, token=token, port=0))
        ...   # http://127.0.0.1:{port}/?token={token}
        n.cancel_scope.cancel()                    # stops the inbox

Hypercorn's trio worker (``hypercorn.trio.serve``) runs the ASGI app in this trio run: no
asyncio event loop, no thread, no second process. The server, the feed's poller and every
page's stream live in one nursery owned by this task. The listening socket is bound here, not
by Hypercorn, so a taken port is refused by name and no half-made socket is left open.
"""

from __future__ import annotations

import errno
import logging
import socket

import trio
from hypercorn.config import Config, Sockets
from hypercorn.trio import serve

from .._broker import Broker
from .._collapse import collapse_single
from ..store import AnswerBoard
from ._app import InboxApp
from ._auth import InboxKeys
from ._feed import Feed
from ._timeline import session_log_of

__all__ = ["InboxListenError", "serve_inbox"]

_log = logging.getLogger("broker.inbox")


class InboxListenError(OSError):
    """The inbox cannot listen where it was asked to: the port is taken (``errno`` is
    ``EADDRINUSE``) or the address is not this host's. The message names the fix."""


async def serve_inbox(
    target: AnswerBoard | Broker,
    *,
    token: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    poll_interval: float = 0.1,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the web inbox of *target* (a broker: its :attr:`~broker.Broker.board`; or an
    answer board) on *host*:*port* until cancelled.

    Start it with ``port = await nursery.start(partial(serve_inbox, broker, token=...))``: it
    hands back the port it listens on (useful with ``port=0``). Every request must carry
    *token* (:mod:`broker.inbox._auth`); the pages poll nothing themselves — one task polls
    ``board.pending()`` every *poll_interval* seconds while a page is open.

    Raises :class:`InboxListenError` (before it started) when the port is taken or the
    address is not this host's, ``ValueError`` for a bad *token* or *port*. Cancellation:
    stops listening and ends every open page's stream at once (their browsers show
    "reconnecting"); no answer is lost — an answering POST either reached the board or not.
    """
    keys = InboxKeys(token=token)
    _check_port(port)
    board = _board(target)
    feed = Feed(board, interval=poll_interval)
    app = InboxApp(board=board, keys=keys, feed=feed, log=session_log_of(board))
    with _listen(host, port) as sock:
        config = _BoundConfig(sock)
        config.accesslog = None
        config.errorlog = _log
        config.graceful_timeout = 0.5
        with collapse_single():
            async with trio.open_nursery() as nursery:
                await nursery.start(feed.run_poller)
                await nursery.start(serve, app, config)
                task_status.started(sock.getsockname()[1])


def _board(target: AnswerBoard | Broker) -> AnswerBoard:
    from .._broker import Broker

    return target.board if isinstance(target, Broker) else target


def _check_port(port: object) -> int:
    if not isinstance(port, int) or isinstance(port, bool) or not (0 <= port <= 65535):
        raise ValueError(
            f"port must be an integer from 0 to 65535 (0: any free port), got {port!r}"
        )
    return port


class _BoundConfig(Config):
    """Hypercorn's settings around a socket bound by :func:`_listen` (module doc)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self._sock = sock

    def create_sockets(self) -> Sockets:
        return Sockets(secure_sockets=[], insecure_sockets=[self._sock], quic_sockets=[])


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to *host*:*port* (Hypercorn listens on it), or
    :class:`InboxListenError` naming the fix."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise InboxListenError(
            errno.EADDRNOTAVAIL,
            f"cannot listen on {host!r}: {exc.strerror}: pass an address of this host "
            "(127.0.0.1 by default)",
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InboxListenError(
                exc.errno,
                f"port {port} on {host} is in use (another inbox?): pass another port, "
                "or 0 for any free one",
            ) from None
        raise InboxListenError(
            exc.errno,
            f"cannot listen on {host} port {port}: {exc.strerror or exc}: pass an address of "
            "this host (127.0.0.1 by default)",
        ) from None
    return sock
