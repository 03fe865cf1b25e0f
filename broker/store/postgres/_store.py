"""The PostgreSQL event store: many brokers, one database; group commit, hash chains.

Synopsis::

    async with open_postgres_store("postgresql://broker@db/broker") as store:
        await store.create_session("s1", None)             # this process's, at epoch 1
        await store.append("s1", [TurnStart(turn=1)])       # returns once COMMIT returned
        head = await store.claim("s0")    # another process's session, once its lease expired

Many broker processes share one database; each session is written by one of them at a time,
the holder of its lease (:mod:`._leases`), renewed by a task of the store's own. Taking over a
session (``claim``) closes the crash tail its former owner left; a group that writes a session
this process no longer holds fails that session's appends with
:class:`~broker.store.SessionFencedError` and lands the rest.

Every call goes through the store-neutral writer actor (:mod:`broker.store._writer`): the
appends of all sessions that arrive while a transaction is being written form the next group,
written as ONE transaction of one statement (:mod:`._jobs`) by the worker thread that owns the
psycopg connection (:mod:`._backend`). A ticket resolves only after COMMIT returned with
``synchronous_commit = on``: the group is in the server's flushed WAL. The chain, the
checkpoints and recovery are the same code as SQLite's.

psycopg is an optional dependency (``pip install 'trio-approval-broker[postgres]'``); it is
imported when a store is opened.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs

from .._group_store import (
    DEFAULT_CHECKPOINT_EVERY,
    DEFAULT_INBOX_SIZE,
    GroupStore,
    check_options,
    running,
)
from .._protocol import StoreOpenError
from .._requests import wall_clock_ms
from .._url import PostgresUrl, parse_store_url, redact_dsn
from .._writer import GroupWriter

if TYPE_CHECKING:
    # Invariant: nothing of psycopg is imported with broker (it is the optional "postgres"
    # extra): the modules that use it are imported where a store or a board is opened.
    from ._board import PostgresBoard
    from ._schema import ServerDurability

__all__ = ["DEFAULT_LEASE_TTL", "PostgresStore", "open_postgres_store"]

log = logging.getLogger("broker.store")

#: Seconds a session's lease lasts unrenewed, by default.
DEFAULT_LEASE_TTL = 10.0


@attrs.define(eq=False)
class PostgresStore(GroupStore):
    """A durable :class:`~broker.store.EventStore` in a PostgreSQL database; made by
    :func:`open_postgres_store`, which owns its writer task.

    Appending to a session that was never created creates it (without a parent), like
    :class:`~broker.store.MemoryStore`; ``create_session`` on an existing one updates its parent.
    """

    def answer_board(self) -> PostgresBoard:
        """The answer board in this store's schema, shared with every process and host on the
        database (:mod:`._board`)."""
        from ._backend import PostgresBackend
        from ._board import PostgresBoard

        backend = self._writer.backend
        assert isinstance(backend, PostgresBackend)
        return PostgresBoard(dsn=backend.dsn, schema=backend.schema)

    @property
    def owner(self) -> str:
        """This process's owner id in the leases it takes (``pid@host#random``)."""
        from ._backend import PostgresBackend

        backend = self._writer.backend
        assert isinstance(backend, PostgresBackend)
        return backend.owner

    @property
    def durability(self) -> ServerDurability:
        """``synchronous_commit`` and ``fsync`` as the server reported them on the writer's own
        connection when it (last) connected: read back, never assumed. A server that would
        acknowledge a commit it has not made durable (``synchronous_commit = off``,
        ``fsync = off``) is warned about once per store, on the ``broker.store`` logger."""
        from ._backend import PostgresBackend

        backend = self._writer.backend
        assert isinstance(backend, PostgresBackend)
        durability = backend.durability
        assert durability is not None  # the store is made after its backend opened
        return durability

    def inject_commit_failure(self, error: Exception, *, landed: bool = False) -> None:
        """Test seam: the next write transaction raises *error* in place of COMMIT and is rolled
        back; its appends raise :class:`~broker.store.StoreError`. With *landed* it commits and
        then raises *error*, as a COMMIT whose acknowledgement was lost would: the appends fail,
        yet their events are in the database.
        """
        self._writer.inject_commit_failure(error, landed=landed)


def _check_lease_ttl(lease_ttl: object) -> None:
    if (
        isinstance(lease_ttl, bool)
        or not isinstance(lease_ttl, int | float)
        or not math.isfinite(lease_ttl)
        or lease_ttl < 0.1
    ):
        raise ValueError(
            f"lease_ttl must be a number of seconds >= 0.1, got {lease_ttl!r}: pass e.g. 10.0"
        )


def _check_dsn(dsn: object) -> str:
    if not isinstance(dsn, str) or not isinstance(
        parse_store_url(dsn, parameter="dsn"), PostgresUrl
    ):
        raise ValueError(
            f"dsn must be a postgresql:// (or postgres://) URL, got {dsn!r}: pass e.g. "
            "'postgresql://user@host/database'"
        )
    return dsn


@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    schema: str = "broker",
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    inbox_size: int = DEFAULT_INBOX_SIZE,
    clock_ms: Callable[[], int] = wall_clock_ms,
    lease_ttl: float = DEFAULT_LEASE_TTL,
) -> AsyncIterator[PostgresStore]:
    """Open the store in *schema* of the database at *dsn* for writing, for the ``async with``
    block; the schema is created in a database that has none.

    Connects (a server that does not answer, or refuses the credentials, raises
    :class:`StoreOpenError` naming the URL without its password), checks the schema (another
    application's, or a newer version, raises :class:`StoreOpenError` with nothing changed;
    version 1 is migrated), and loads nothing: a session's projection is rebuilt from its
    checkpoint and tail when this process claims it, and its crash tail closed then (see
    :attr:`PostgresStore.recovery`): each unanswered question ``cancelled`` with
    ``recovered: true``, an open turn ``interrupted``. A broker of schema version 1 that
    still writes the store alone makes the open fail with :class:`StoreLockedError`. The
    writer's connection reads the server's ``synchronous_commit`` and ``fsync``
    (:attr:`PostgresStore.durability`) and warns once, on the ``broker.store`` logger, when the
    server would acknowledge a commit it has not made durable.

    *lease_ttl*: seconds a session's lease lasts unrenewed (renewed every third of it): how
    long after its owner stopped another process may take a session over.
    *checkpoint_every*: write a session's projection every N events and at close (0: never).
    *inbox_size*: the bound of the writer's inbox and of a commit group. *clock_ms*: the wall
    clock stored with each row (for tests).

    Cancellation: opening is not interruptible (blocking jobs on the writer thread). On exit —
    also by cancellation or error — the store is closed as by :meth:`PostgresStore.aclose`.
    Errors: opening errors and the block's own exception are raised as themselves.
    """
    _check_dsn(dsn)
    check_options(checkpoint_every, inbox_size)
    try:
        from ._backend import PostgresBackend
        from ._schema import check_schema_name
    except ImportError as exc:  # psycopg is an optional dependency
        raise StoreOpenError(
            f"cannot open postgresql store '{redact_dsn(dsn)}': psycopg is not installed "
            f"({exc}); install it with pip install 'trio-approval-broker[postgres]'"
        ) from exc
    check_schema_name(schema)
    _check_lease_ttl(lease_ttl)
    backend = PostgresBackend(dsn=dsn, schema=schema, ttl=lease_ttl)
    writer = GroupWriter(
        backend=backend,
        checkpoint_every=checkpoint_every,
        inbox_size=inbox_size,
        clock_ms=clock_ms,
    )
    # Opened before the nursery exists, so an open error is raised as itself, not in a group.
    await writer.open()
    durability = backend.durability
    if durability is not None:
        log.info(
            "%s open for writing: synchronous_commit=%s, fsync=%s, read from the server on "
            "the writer's connection",
            backend.label,
            durability.synchronous_commit,
            durability.fsync,
        )
    async with running(
        PostgresStore(writer), f"postgresql store writer {backend.location!r}"
    ) as store:
        yield store
