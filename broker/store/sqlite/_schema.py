"""The on-disk format of a SQLite store and the checks made before anything is written to it.

A file is a broker store iff its SQLite header carries :data:`APPLICATION_ID`; its
``user_version`` is the schema version. Both are checked from the raw header bytes *before*
SQLite opens the file, and again through SQLite, so a file that is not ours (random bytes,
another application's database, a newer schema) is refused without a single byte changed.
Only an empty file or an empty SQLite database is initialised.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import struct
import time
import urllib.parse
from pathlib import Path
from typing import Literal

from ..._private_files import create_private_file, warn_if_shared
from .._protocol import StoreOpenError

__all__ = [
    "APPLICATION_ID",
    "BOARD_DDL",
    "PEOPLE_DDL",
    "READABLE_VERSIONS",
    "SCHEMA_VERSION",
    "WAL_AUTOCHECKPOINT_PAGES",
    "Synchronous",
    "check_writer_path",
    "connect_reader",
    "connect_writer",
    "lock_path_for",
    "read_synchronous",
    "schema_version",
    "weaker_than",
]

APPLICATION_ID = 0x42524B52  # "BRKR"
SCHEMA_VERSION = 2
#: The versions a reader reads as they are (a writer migrates an older one first).
READABLE_VERSIONS = (1, 2)
Synchronous = Literal["FULL", "NORMAL"]
#: ``PRAGMA synchronous``'s levels as SQLite numbers them, weakest first.
_SYNCHRONOUS_LEVELS = ("OFF", "NORMAL", "FULL", "EXTRA")

log = logging.getLogger("broker.store")

_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEADER_SIZE = 100
_U32 = struct.Struct(">I")
_TABLES = ("sessions", "events", "checkpoints")

# Invariant: the DDL and the chain byte form (broker.store._chain) are schema version 2.
# events is a rowid table with NO index on the session: rows arrive interleaved across sessions,
# and an index keyed by session dirtied one page per session per commit group (its tail), most
# of the writer's cost (bench.index_cost). Each row instead names its session's previous row
# (prev_row, NULL for seq 1; always a smaller id) and the session its last (head_row), so a
# group only appends to the table's last pages, and a session is read back by walking its
# chain from the head (._walk). ids are assigned by the writer, which holds the file's lock.
_EVENTS_DDL = """CREATE TABLE events (
        session_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts_ms INTEGER NOT NULL,
        line TEXT NOT NULL,
        prev_hash BLOB NOT NULL,
        hash BLOB NOT NULL,
        prev_row INTEGER,
        id INTEGER PRIMARY KEY
    )"""
_DDL = (
    """CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        parent_id TEXT,
        created_ms INTEGER NOT NULL,
        head_seq INTEGER NOT NULL,
        head_hash BLOB NOT NULL,
        head_row INTEGER
    )""",
    _EVENTS_DDL,
    """CREATE TABLE checkpoints (
        session_id TEXT PRIMARY KEY NOT NULL,
        seq INTEGER NOT NULL,
        state TEXT NOT NULL,
        projection TEXT NOT NULL
    ) WITHOUT ROWID""",
)

#: Version 1 to 2, as ONE transaction (all of it or none of it lands, a crash included): the
#: events are copied into the version-2 table in their order (ids are version 1's rowids, so
#: the order rows were appended in is kept), each naming its session's previous row; each
#: session's head row is found through version 1's (session_id, seq) key before it is dropped.
_MIGRATE_1_TO_2 = (
    _EVENTS_DDL.replace("CREATE TABLE events", "CREATE TABLE events_v2"),
    """INSERT INTO events_v2 (id, session_id, seq, ts_ms, line, prev_hash, hash, prev_row)
        SELECT rowid, session_id, seq, ts_ms, line, prev_hash, hash,
            lag(rowid) OVER (PARTITION BY session_id ORDER BY seq)
        FROM events ORDER BY rowid""",
    "ALTER TABLE sessions ADD COLUMN head_row INTEGER",
    """UPDATE sessions SET head_row = (
        SELECT rowid FROM events WHERE session_id = sessions.id AND seq = sessions.head_seq)""",
    "DROP TABLE events",
    "ALTER TABLE events_v2 RENAME TO events",
    "PRAGMA user_version = 2",
)


#: The people who may answer (:mod:`broker.store._people`); also made by the first
#: ``broker people add`` on a store an older broker made.
PEOPLE_DDL = """CREATE TABLE IF NOT EXISTS board_people (
        name TEXT PRIMARY KEY NOT NULL,
        groups TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        added_ms INTEGER NOT NULL
    )"""

#: The answer board's tables (:mod:`._board`), beside the log in the same file. Created by the
#: writer when it opens the file (``IF NOT EXISTS``: a file made before the board gains them
#: without a new schema version), so no other process changes the schema under a running writer.
BOARD_DDL = (
    """CREATE TABLE IF NOT EXISTS board_questions (
        id TEXT PRIMARY KEY NOT NULL,
        session_id TEXT NOT NULL,
        asked_ms INTEGER NOT NULL,
        question TEXT NOT NULL
    )""",
    """CREATE INDEX IF NOT EXISTS board_questions_asked
        ON board_questions (asked_ms)""",
    """CREATE TABLE IF NOT EXISTS board_answers (
        question_id TEXT PRIMARY KEY NOT NULL,
        outcome TEXT NOT NULL,
        answered_by TEXT,
        answered_ms INTEGER NOT NULL,
        always INTEGER NOT NULL DEFAULT 0,
        always_how TEXT,
        message TEXT
    )""",
    # People who may answer (broker people add): a name, groups, their token's hash.
    PEOPLE_DDL,
    # Every answer given to a question (deciding, counted towards a quorum, or refused), in
    # the order given (rowid): who, how they were authenticated, why refused.
    """CREATE TABLE IF NOT EXISTS board_given (
        question_id TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        given_by TEXT,
        how TEXT,
        refused TEXT
    )""",
    """CREATE INDEX IF NOT EXISTS board_given_question ON board_given (question_id)""",
    # Grants revoked from elsewhere (broker grants revoke); the first revocation stands.
    """CREATE TABLE IF NOT EXISTS board_revocations (
        grant_id TEXT PRIMARY KEY NOT NULL,
        revoked_by TEXT,
        revoked_ms INTEGER NOT NULL
    )""",
)


def lock_path_for(path: str) -> str:
    """The lock file a writer holds next to the store file *path*."""
    return path + ".lock"


def _not_a_store(path: str, why: str) -> StoreOpenError:
    return StoreOpenError(
        f"store file '{path}' is not a broker store: {why}; "
        "pass the path of a store created by broker, or a new file name"
    )


def _newer(path: str, version: int) -> StoreOpenError:
    return StoreOpenError(
        f"store file '{path}' has schema version {version}, newer than this broker supports "
        f"({SCHEMA_VERSION}): upgrade broker to open it"
    )


def _check_header(path: str) -> bool:
    """Check the raw header of an existing file; True iff it is empty (a new store)."""
    try:
        with open(path, "rb") as file:
            header = file.read(_HEADER_SIZE)
    except OSError as exc:
        raise StoreOpenError(
            f"cannot read store file '{path}': {exc.strerror or exc}; check the path and its "
            "permissions"
        ) from exc
    if not header:
        return True
    if len(header) < _HEADER_SIZE or not header.startswith(_SQLITE_MAGIC):
        raise _not_a_store(path, "it is not an SQLite database (bad header)")
    (user_version,) = _U32.unpack_from(header, 60)
    (application_id,) = _U32.unpack_from(header, 68)
    if application_id not in (0, APPLICATION_ID):
        raise _not_a_store(
            path,
            f"it is an SQLite database of another application (application_id "
            f"{application_id:#x}, expected {APPLICATION_ID:#x})",
        )
    if application_id == APPLICATION_ID and user_version > SCHEMA_VERSION:
        raise _newer(path, user_version)
    return False


def _classify(conn: sqlite3.Connection, path: str) -> int:
    """Check an open connection's pragmas and tables: the schema version, 0 for an empty
    database."""
    (application_id,) = conn.execute("PRAGMA application_id").fetchone()
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema")}
    if application_id == 0 and user_version == 0 and not names:
        return 0
    if application_id != APPLICATION_ID:
        raise _not_a_store(
            path,
            f"it is an SQLite database of another application (application_id "
            f"{application_id:#x}, expected {APPLICATION_ID:#x})",
        )
    if user_version > SCHEMA_VERSION:
        raise _newer(path, user_version)
    if user_version not in READABLE_VERSIONS:
        raise StoreOpenError(
            f"store file '{path}' has unsupported schema version {user_version} (this broker "
            f"reads versions {READABLE_VERSIONS[0]} to {SCHEMA_VERSION}): restore it from a "
            "backup"
        )
    missing = [name for name in _TABLES if name not in names]
    if missing:
        raise StoreOpenError(
            f"store file '{path}' is damaged: table '{missing[0]}' is missing; "
            "restore it from a backup"
        )
    return int(user_version)


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version of the store *conn* reads (one of :data:`READABLE_VERSIONS`), as of
    the connection's current snapshot. Blocking."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(version)


def _migrate(conn: sqlite3.Connection, path: str, version: int) -> None:
    """Bring a version-1 file to :data:`SCHEMA_VERSION` in one transaction (nothing when it is
    there already). A failure rolls all of it back: the file stays version 1."""
    if version == SCHEMA_VERSION:
        return
    started = time.monotonic()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _MIGRATE_1_TO_2:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    log.info(
        "store file '%s' migrated from schema version %d to %d in %.1f s",
        path,
        version,
        SCHEMA_VERSION,
        time.monotonic() - started,
    )


def _sqlite_failure(path: str, exc: sqlite3.Error) -> StoreOpenError:
    text = str(exc)
    if "not a database" in text:
        return _not_a_store(path, "it is not an SQLite database (bad header)")
    return StoreOpenError(f"cannot open store file '{path}': sqlite says {text!r}")


def check_writer_path(path: str) -> None:
    """Check that a writer may open *path* (its directory exists and is writable, and the file,
    if any, is a broker store); raises :class:`StoreOpenError`. Reads only; blocking.
    """
    if os.path.isdir(path):
        raise StoreOpenError(f"store path '{path}' is a directory: pass a file name inside it")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise StoreOpenError(
            f"cannot open store file '{path}': directory '{directory}' does not exist; "
            "create it first"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreOpenError(
            f"cannot open store file '{path}' for writing: directory '{directory}' is not "
            "writable (the store keeps its -wal, -shm and .lock files next to it); fix the "
            "permissions, or open the store read-only"
        )
    if os.path.exists(path):
        _check_header(path)


#: Pages the WAL may hold before the writer's commit copies them into the file (SQLite's
#: default is 1 000). A commit group of 128 questions across 128 sessions dirties ~250 pages
#: (each session's tail of the (session_id, seq) index is a page of its own), so at the default
#: every fourth commit also ran a checkpoint — a copy of ~1 000 pages and an fsync of the file —
#: on the writer's thread, and the hot index pages were copied again at each. At 10 000 (~40 MiB
#: of WAL) a page rewritten by many commits is copied once: ~20 % more durable asks/s
#: (design/store.md, "Stop 30"). The WAL stays bounded, and is emptied at close.
WAL_AUTOCHECKPOINT_PAGES = 10_000


def connect_writer(path: str, synchronous: Synchronous) -> sqlite3.Connection:
    """Open (creating if new) the store at *path* for writing, in WAL mode.

    The caller must already hold the writer lock (:func:`lock_path_for`). Raises
    :class:`StoreOpenError`; on error nothing in the file was changed. Blocking: call it on the
    thread that will own the connection.
    """
    check_writer_path(path)
    try:
        # Private from the first byte: SQLite gives its -wal and -shm the database's mode.
        create_private_file(path)
    except OSError as exc:
        raise StoreOpenError(
            f"cannot create store file '{path}': {exc.strerror or exc}; check the folder's "
            "permissions"
        ) from exc
    for side in (path + "-wal", path + "-shm"):
        warn_if_shared(side)
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise _sqlite_failure(path, exc) from exc
    try:
        # Invariant: nothing below writes until _classify accepted the file.
        version = _classify(conn, path)
        if version == 0:
            conn.execute("BEGIN IMMEDIATE")
            for statement in _DDL:
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        else:
            _migrate(conn, path, version)
        conn.execute("BEGIN IMMEDIATE")
        for statement in BOARD_DDL:
            conn.execute(statement)
        # A board made before answers had terms (always for 30m, for the project) or messages
        # gains the columns; its rows keep NULL: a plain always, no message.
        columns = {row[1] for row in conn.execute("PRAGMA table_info(board_answers)")}
        for column in ("always_how", "message"):
            if column not in columns:
                conn.execute(f"ALTER TABLE board_answers ADD COLUMN {column} TEXT")
        conn.execute("COMMIT")
        (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if str(mode).lower() != "wal":
            raise StoreOpenError(
                f"cannot open store file '{path}': sqlite refused WAL mode (got {mode!r}); "
                "put the store on a local file system"
            )
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    except sqlite3.Error as exc:
        conn.close()
        raise _sqlite_failure(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn


def read_synchronous(conn: sqlite3.Connection) -> str:
    """What *conn* itself reports for ``PRAGMA synchronous``: ``"OFF"``, ``"NORMAL"``,
    ``"FULL"`` or ``"EXTRA"`` (SQLite answers a number; anything else as its text). Blocking:
    call it on the thread that owns *conn*."""
    row = conn.execute("PRAGMA synchronous").fetchone()
    level = None if row is None else row[0]
    if isinstance(level, int) and 0 <= level < len(_SYNCHRONOUS_LEVELS):
        return _SYNCHRONOUS_LEVELS[level]
    return str(level)


def weaker_than(reported: str, asked: Synchronous) -> bool:
    """Whether the level *reported* syncs less than *asked* (an unknown one counts as weaker)."""
    if reported not in _SYNCHRONOUS_LEVELS:
        return True
    return _SYNCHRONOUS_LEVELS.index(reported) < _SYNCHRONOUS_LEVELS.index(asked)


def connect_reader(path: str) -> sqlite3.Connection:
    """Open the store at *path* read-only (``mode=ro``): nothing in the file can change.

    Raises :class:`StoreOpenError` for a missing file or a file that is not a broker store.
    """
    if not os.path.exists(path):
        raise StoreOpenError(f"store file '{path}' does not exist: check the path")
    if os.path.isdir(path):
        raise StoreOpenError(f"store path '{path}' is a directory: pass the store file inside it")
    # Invariant: no Python-level open() of the store file here. This may run in a process
    # whose writer connection holds the file: closing any descriptor of a file drops every
    # POSIX lock the process holds on it, SQLite's included, and another process could then
    # take the WAL for its own and checkpoint it under the writer (a corrupted file). SQLite
    # itself reads the header below; it shares one descriptor set per file and process.
    if os.path.getsize(path) == 0:
        raise _not_a_store(path, "the file is empty")
    uri = "file:" + urllib.parse.quote(str(Path(path).absolute())) + "?mode=ro"
    directory = os.path.dirname(os.path.abspath(path))
    if not os.access(directory, os.W_OK) and not os.path.exists(path + "-wal"):
        # A WAL reader must create the -shm file; it cannot here. No -wal file and no way for
        # a writer to create one means the file is complete and cannot change: read it as
        # immutable (no locks, no side files).
        uri += "&immutable=1"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise _sqlite_failure(path, exc) from exc
    try:
        if _classify(conn, path) == 0:
            raise _not_a_store(path, "it is an empty SQLite database")
    except sqlite3.Error as exc:
        conn.close()
        raise _sqlite_failure(path, exc) from exc
    except BaseException:
        conn.close()
        raise
    return conn
