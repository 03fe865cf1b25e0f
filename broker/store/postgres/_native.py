"""One prepared statement on a psycopg connection's libpq handle, run from the trio thread.

psycopg's blocking API needs a thread per call (``trio.to_thread``: a hand-off there and back,
~0.17 ms round trip on a 2-core VM, plus its Python adaptation) and its async API needs asyncio.
For the one statement on the path of an answer from elsewhere (the board's answer, issue 23's
latency), this module drives libpq's non-blocking calls (``psycopg.pq``, the documented libpq
wrapper) directly: send, flush, and wait on the socket with
:func:`trio.lowlevel.wait_readable` — the way the board's listener already waits.

Synopsis::

    statement = Prepared(name=b"broker_answer", text=b"SELECT ... $1 ...")
    result = await statement.run(conn, [b"text", None])      # conn: an idle, autocommit one

Parameters are sent in text format as UTF-8 (the connection must use ``client_encoding``
UTF8); None is NULL. libpq reads a text parameter up to its first NUL, so a value holding one
is refused before anything is sent (:class:`psycopg.DataError`, as psycopg itself refuses it).
The statement is prepared once per connection (one more round trip, the first time).

The connection must be idle and in autocommit and must not be used by anything else meanwhile
(the caller holds its lock); psycopg reads the transaction status from libpq, so it finds the
connection as it left it. A failed statement raises psycopg's exception for its SQLSTATE; a lost
connection raises :class:`psycopg.OperationalError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import psycopg
import trio
from psycopg import pq
from psycopg.errors import error_from_result

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg.pq.abc import PGconn, PGresult

__all__ = ["Prepared", "encode_params"]

_NUL_MESSAGE = "PostgreSQL text fields cannot contain NUL (0x00) bytes"


def encode_params(values: Sequence[str | int | bool | None]) -> list[bytes | None]:
    """*values* as libpq text parameters: UTF-8 text, decimal ints, ``t``/``f``, None is NULL.
    Raises :class:`psycopg.DataError` for text holding a NUL."""
    out: list[bytes | None] = []
    for value in values:
        if value is None:
            out.append(None)
        elif value is True or value is False:
            out.append(b"t" if value else b"f")
        elif isinstance(value, int):
            out.append(str(value).encode())
        elif "\x00" in value:
            raise psycopg.DataError(_NUL_MESSAGE)
        else:
            out.append(value.encode())
    return out


@attrs.define(eq=False)
class Prepared:
    """A statement *text* (``$1``… placeholders) prepared as *name* on each connection it runs
    on, the first time it runs there."""

    name: bytes
    text: bytes
    # The connection it is prepared on (held, so that a new one is never mistaken for it).
    _ready_on: PGconn | None = attrs.field(default=None, init=False)

    async def run(self, conn: Connection[Any], params: Sequence[bytes | None]) -> PGresult:
        """The statement's result on *conn* (module doc: idle, autocommit, not shared meanwhile).

        Cancellation: shielded — a statement sent is waited for, so that whether it committed
        is known and the connection is left idle. If anything else interrupts it, *conn* is
        closed (its state is unknown) and the error propagates.
        """
        pgconn = conn.pgconn
        with trio.CancelScope(shield=True):
            try:
                if self._ready_on is not pgconn:
                    pgconn.send_prepare(self.name, self.text)
                    _check(await _results(pgconn), conn)
                    self._ready_on = pgconn
                pgconn.send_query_prepared(self.name, params)
                result = _check(await _results(pgconn), conn)
            except psycopg.Error:
                if pgconn.status != pq.ConnStatus.OK:
                    conn.close()
                raise
            except BaseException:
                conn.close()
                raise
        return result


async def _results(pgconn: PGconn) -> list[PGresult]:
    """Send what libpq holds and collect every result of the command (libpq's non-blocking
    protocol: flush until sent, then consume input until not busy, then get each result).
    Yields to trio at least once: on the socket, or (everything already read) at the end."""
    waited = False
    while pgconn.flush():
        await trio.lowlevel.wait_writable(pgconn.socket)
        waited = True
        pgconn.consume_input()  # the server may be talking back meanwhile
    results: list[PGresult] = []
    while True:  # noqa: ASYNC913 (it waits on the socket whenever libpq has no result ready)
        while pgconn.is_busy():
            await trio.lowlevel.wait_readable(pgconn.socket)
            waited = True
            pgconn.consume_input()  # raises OperationalError on a lost connection
        result = pgconn.get_result()
        if result is None:
            if not waited:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return results  # noqa: ASYNC910 (it yielded, or checkpointed above)
        results.append(result)


def _check(results: list[PGresult], conn: Connection[Any]) -> PGresult:
    if not results:
        raise psycopg.OperationalError("the server sent no result for the statement")
    for result in results:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            raise error_from_result(result, encoding=conn.info.encoding)
    return results[-1]
