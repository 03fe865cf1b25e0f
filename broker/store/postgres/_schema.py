"""The layout of a PostgreSQL store and the checks made before anything is written to it.

A store is one PostgreSQL schema (``broker`` unless told otherwise) holding four tables. Its
``store_info`` row says whose it is (:data:`APPLICATION`) and which layout (:data:`SCHEMA_VERSION`);
a schema that exists but is not ours, or is of a newer version, is refused with nothing changed.
Only a missing or empty schema is initialised, in one transaction, under an advisory lock (two
brokers opening one new database at once do not both create it).

Schema version 2 (the hash chain is :mod:`broker.store._chain`'s, the same as SQLite's)::

    store_info  (application text, version int)                  -- exactly one row
    sessions    (id text PK, parent_id text, created_ms int8, head_seq int8, head_hash bytea,
                 ord int8 identity,                              -- ord = creation order
                 owner text, epoch int8, lease_expires_ms int8)  -- the session's lease
    events      (session_id text, seq int8, ts_ms int8, line text, prev_hash bytea,
                 hash bytea, PRIMARY KEY (session_id, seq))
    checkpoints (session_id text PK, seq int8, state text, projection text)

Version 1 had no lease columns; a writer adds them (:data:`_MIGRATE_1_TO_2`, in the same
transaction as the version bump, under the initialisation lock) the first time it opens such a
store. A reader reads both.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs
import psycopg
from psycopg import sql

from .._protocol import StoreOpenError
from .._url import redact_dsn

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = [
    "APPLICATION",
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "ServerDurability",
    "check_schema_name",
    "connect",
    "durability_warning",
    "prepare_schema",
    "read_durability",
]

APPLICATION = "broker-event-store"
SCHEMA_VERSION = 2
DEFAULT_SCHEMA = "broker"
_TABLES = ("store_info", "sessions", "events", "checkpoints")
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# Invariant: the DDL, the store_info row and the chain byte form are schema version 2.
_DDL = (
    "CREATE TABLE {s}.store_info (application text NOT NULL, version integer NOT NULL)",
    """CREATE TABLE {s}.sessions (
        id text PRIMARY KEY,
        parent_id text,
        created_ms bigint NOT NULL,
        head_seq bigint NOT NULL,
        head_hash bytea NOT NULL,
        ord bigint GENERATED ALWAYS AS IDENTITY,
        owner text,
        epoch bigint NOT NULL DEFAULT 0,
        lease_expires_ms bigint NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE {s}.events (
        session_id text NOT NULL,
        seq bigint NOT NULL,
        ts_ms bigint NOT NULL,
        line text NOT NULL,
        prev_hash bytea NOT NULL,
        hash bytea NOT NULL,
        PRIMARY KEY (session_id, seq)
    )""",
    """CREATE TABLE {s}.checkpoints (
        session_id text PRIMARY KEY,
        seq bigint NOT NULL,
        state text NOT NULL,
        projection text NOT NULL
    )""",
)


# Version 1 → 2: the lease of each session (no owner, epoch 0: the first claim takes it).
_MIGRATE_1_TO_2 = (
    "ALTER TABLE {s}.sessions ADD COLUMN owner text, "
    "ADD COLUMN epoch bigint NOT NULL DEFAULT 0, "
    "ADD COLUMN lease_expires_ms bigint NOT NULL DEFAULT 0",
    "UPDATE {s}.store_info SET version = 2",
)


def check_schema_name(schema: str) -> None:
    """Refuse a schema name that is not a plain lower-case identifier."""
    if not isinstance(schema, str) or not _NAME.match(schema):
        raise ValueError(
            f"schema must be a lower-case identifier (letters, digits, _; at most 63), got "
            f"{schema!r}: pass a name such as 'broker'"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def connect(dsn: str) -> Connection[tuple[object, ...]]:
    """A connection to *dsn* (not in autocommit: every write is an explicit transaction) with
    ``synchronous_commit = on``. Raises :class:`StoreOpenError`. Blocking."""
    try:
        conn = psycopg.connect(dsn, autocommit=False, connect_timeout=10)
    except psycopg.Error as exc:
        raise StoreOpenError(
            f"cannot connect to postgresql store '{redact_dsn(dsn)}': {_first_line(exc)}; "
            "check the URL, the server and the credentials"
        ) from exc
    try:
        # An acknowledged append must survive a server crash: COMMIT returns after the WAL is
        # flushed, whatever the server's default says.
        conn.execute("SET synchronous_commit = on")
        conn.commit()
    except BaseException:
        conn.close()
        raise
    return conn


# synchronous_commit values with which the server flushes a commit's WAL to its own disk before
# it answers (remote_write and remote_apply also wait for standbys); "off" answers before.
_FLUSHED_BEFORE_ANSWER = frozenset({"on", "local", "remote_write", "remote_apply"})


@attrs.frozen
class ServerDurability:
    """What the server said, on the writer's own connection, when it connected:
    ``SHOW synchronous_commit`` (after the connection set it ``on``) and ``SHOW fsync``."""

    synchronous_commit: str
    fsync: str

    def warning(self, label: str) -> str | None:
        """The one warning for the store *label* when the server would acknowledge a commit
        it has not made durable (see :func:`durability_warning`), else None."""
        return durability_warning(label, self.synchronous_commit, self.fsync)


def durability_warning(label: str, synchronous_commit: str, fsync: str) -> str | None:
    """What to warn about the store *label* when a server with these settings would acknowledge
    a commit it has not made durable, naming each setting and its fix; None when it would not.

    ``synchronous_commit = off`` answers before the commit's WAL is flushed (a server crash
    loses it); ``local``, ``on``, ``remote_write`` and ``remote_apply`` flush it first.
    ``fsync = off`` never forces the WAL to disk (a power cut or an OS crash loses it). A value
    this broker does not know counts as not durable."""
    problems = []
    if synchronous_commit not in _FLUSHED_BEFORE_ANSWER:
        problems.append(
            f"synchronous_commit is '{synchronous_commit}' on the writer's connection, so the "
            "server answers a commit before its wal is flushed and a server crash can lose "
            "it; set synchronous_commit = on for this role or database, and connect without "
            "a pooler that drops session settings"
        )
    if fsync != "on":
        problems.append(
            f"fsync is '{fsync}' on the server, so it never forces its wal to disk and a "
            "power cut or an os crash can lose it; set fsync = on in postgresql.conf and "
            "reload the server"
        )
    if not problems:
        return None
    return f"{label}: acknowledged appends may not survive a crash: " + "; and ".join(problems)


def read_durability(conn: Connection[tuple[object, ...]]) -> ServerDurability:
    """``SHOW synchronous_commit`` and ``SHOW fsync`` on *conn* (leaves no transaction open).
    Blocking."""
    synchronous_commit = conn.execute("SHOW synchronous_commit").fetchone()
    fsync = conn.execute("SHOW fsync").fetchone()
    conn.commit()
    return ServerDurability(
        synchronous_commit="" if synchronous_commit is None else str(synchronous_commit[0]),
        fsync="" if fsync is None else str(fsync[0]),
    )


def prepare_schema(
    conn: Connection[tuple[object, ...]], where: str, schema: str, *, create: bool = True
) -> None:
    """Check *schema*'s layout, creating it when missing or empty and migrating version 1 to
    :data:`SCHEMA_VERSION` (unless not *create*). Raises :class:`StoreOpenError` (nothing
    changed) for another application's schema, a newer or older version, missing tables, or no
    right to create it. Leaves no transaction open."""
    s = sql.Identifier(schema)
    try:
        # Serialises initialisation between brokers opening one new database at once.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"broker-init:{schema}",))
        tables = {
            str(name)
            for (name,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        }
        if not tables and not create:
            raise StoreOpenError(
                f"{where} holds no broker store (schema '{schema}' has no tables): pass the URL "
                "of a database a broker has written to"
            )
        if not tables:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {s}").format(s=s))
            for statement in _DDL:
                conn.execute(sql.SQL(statement).format(s=s))
            conn.execute(
                sql.SQL("INSERT INTO {s}.store_info (application, version) VALUES (%s, %s)").format(
                    s=s
                ),
                (APPLICATION, SCHEMA_VERSION),
            )
            conn.commit()
            return
        version = _classify(conn, where, schema, tables)
        if version == 1 and create:  # a reader reads version 1 as it is
            for statement in _MIGRATE_1_TO_2:
                conn.execute(sql.SQL(statement).format(s=s))
        conn.commit()
    except psycopg.errors.InsufficientPrivilege as exc:
        conn.rollback()
        raise StoreOpenError(
            f"{where} has no broker schema '{schema}' and this role may not create it "
            f"({_first_line(exc)}): let a role that may run broker once, or grant CREATE on "
            "the database"
        ) from exc
    except psycopg.Error as exc:
        conn.rollback()
        raise StoreOpenError(f"cannot open {where}: postgresql says {_first_line(exc)!r}") from exc
    except BaseException:
        conn.rollback()
        raise


def _classify(
    conn: Connection[tuple[object, ...]],
    where: str,
    schema: str,
    tables: set[str],
) -> int:
    """The store's schema version: :data:`SCHEMA_VERSION` or 1 (a writer migrates it);
    anything else raises :class:`StoreOpenError`."""
    if "store_info" not in tables:
        raise _not_a_store(where, schema, "it has tables but no store_info table")
    rows = conn.execute(
        sql.SQL("SELECT application, version FROM {s}.store_info").format(s=sql.Identifier(schema))
    ).fetchall()
    if len(rows) != 1 or rows[0][0] != APPLICATION:
        found = rows[0][0] if len(rows) == 1 else f"{len(rows)} rows"
        raise _not_a_store(where, schema, f"its store_info names {found!r}")
    version = rows[0][1]
    if not isinstance(version, int):
        raise _not_a_store(where, schema, f"its version is {version!r}")
    if version > SCHEMA_VERSION:
        raise StoreOpenError(
            f"{where} has schema version {version}, newer than this broker supports "
            f"({SCHEMA_VERSION}): upgrade broker to open it"
        )
    if version not in (1, SCHEMA_VERSION):
        raise StoreOpenError(
            f"{where} has unsupported schema version {version} (this broker reads versions 1 "
            f"to {SCHEMA_VERSION}): restore it from a backup"
        )
    missing = [name for name in _TABLES if name not in tables]
    if missing:
        raise StoreOpenError(
            f"{where} is damaged: table '{schema}.{missing[0]}' is missing; restore it from a "
            "backup"
        )
    return version


def _not_a_store(where: str, schema: str, why: str) -> StoreOpenError:
    return StoreOpenError(
        f"{where} is not a broker store: schema '{schema}' belongs to another application "
        f"({why}); pass another schema, or a database of its own"
    )
