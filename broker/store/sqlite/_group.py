"""How one commit group is written to SQLite: its SQL, one statement or several.

A group is written as ONE SQL statement when SQLite has JSON functions, the group has at most
:data:`MAX_ROWS` rows and no session id of its creates or checkpoints holds a NUL: a multi-row
INSERT into a connection-local view whose triggers store each event row as bound and move each
session's head, after one leading row that carries the group's creates and checkpoints as JSON
arrays (:func:`install_group_write`, :func:`group_statement`). Else it is written statement by
statement with the plain statements below.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._plan import Plan

__all__ = [
    "AUTO_CREATE_SQL",
    "CHECKPOINT_SQL",
    "CREATE_SQL",
    "HEAD_SQL",
    "INSERT_SQL",
    "MAX_ROWS",
    "group_statement",
    "install_group_write",
    "nul_free",
]


CREATE_SQL = (
    "INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash) VALUES (?, ?, ?, 0, ?) "
    "ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id"
)
AUTO_CREATE_SQL = (
    "INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash) VALUES (?, ?, ?, 0, ?) "
    "ON CONFLICT (id) DO NOTHING"
)
INSERT_SQL = (
    "INSERT INTO events (session_id, seq, ts_ms, line, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)"
)
HEAD_SQL = "UPDATE sessions SET head_seq = ?, head_hash = ? WHERE id = ?"
CHECKPOINT_SQL = (
    "INSERT INTO checkpoints (session_id, seq, state, projection) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, "
    "projection = excluded.projection"
)

# The whole group as ONE statement: a multi-row INSERT into a connection-local (TEMP) view whose
# INSTEAD OF triggers do what the statements above do. SQLite runs it in C with the GIL released
# from the first row to COMMIT (in autocommit mode the statement is its own transaction, all or
# nothing, fsynced at its end with synchronous=FULL), so the trio thread stages the next group
# meanwhile. Its rows, in this order, each told apart by which columns are NULL:
# - a leading row with a NULL session id (only if the group has any): the group's creates,
#   auto-creates and checkpoints as JSON arrays — [[id, parent_id], ...], [id, ...] and
#   [[id, seq, state, fp], ...] — so each session exists before its head moves;
# - an event row, (session_id, seq, ts_ms, line, prev_hash, hash): the plan's own tuples,
#   flattened and bound as they are (no line is escaped into JSON and back);
# - a head row, (session_id, seq, NULL, NULL, NULL, hash): a session's new head;
# - padding, all NULL (a statement is made for a few sizes only): skipped.
# Rows run in VALUES order. Nothing of this is stored in the file.
_GROUP_DDL = (
    "PRAGMA temp_store = MEMORY",
    "CREATE TEMP VIEW group_rows (session_id, seq, ts_ms, line, prev_hash, hash, creates, "
    "auto_creates, checkpoints) AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    """CREATE TEMP TRIGGER group_rows_event INSTEAD OF INSERT ON group_rows
        WHEN NEW.line IS NOT NULL BEGIN
        INSERT INTO events (session_id, seq, ts_ms, line, prev_hash, hash)
            VALUES (NEW.session_id, NEW.seq, NEW.ts_ms, NEW.line, NEW.prev_hash, NEW.hash);
    END""",
    """CREATE TEMP TRIGGER group_rows_head INSTEAD OF INSERT ON group_rows
        WHEN NEW.line IS NULL AND NEW.session_id IS NOT NULL BEGIN
        UPDATE sessions SET head_seq = NEW.seq, head_hash = NEW.hash WHERE id = NEW.session_id;
    END""",
    """CREATE TEMP TRIGGER group_rows_meta INSTEAD OF INSERT ON group_rows
        WHEN NEW.session_id IS NULL AND NEW.ts_ms IS NOT NULL BEGIN
        INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), NEW.ts_ms, 0,
                zeroblob(32)
            FROM json_each(NEW.creates) WHERE true
            ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id;
        INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash)
            SELECT value, NULL, NEW.ts_ms, 0, zeroblob(32) FROM json_each(NEW.auto_creates)
            WHERE true ON CONFLICT (id) DO NOTHING;
        INSERT INTO checkpoints (session_id, seq, state, projection)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), json_extract(value, '$[3]')
            FROM json_each(NEW.checkpoints) WHERE true
            ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state,
                projection = excluded.projection;
    END""",
)
_INSERT = "INSERT INTO temp.group_rows VALUES "
_META_ROW = "(NULL,NULL,?,NULL,NULL,NULL,?,?,?)"
_EVENT_ROW = "(?,?,?,?,?,?,NULL,NULL,NULL)"  # an event row, a head row or padding
_EVENT_WIDTH = 6
# Statements are made for these row counts only (a group is padded up to the next one with
# all-NULL rows, which the triggers skip), so that a few prepared statements serve every group:
# steps of about 1.5x, at most a third of a statement's rows padding.
_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: The most event and head rows one statement takes; a larger group is written statement by
#: statement.
MAX_ROWS = _SIZES[-1]
_PADDING = (None,) * (_EVENT_WIDTH * MAX_ROWS)
_STATEMENTS: dict[tuple[int, bool], str] = {}


def _statement(size: int, meta: bool) -> str:
    sql = _STATEMENTS.get((size, meta))
    if sql is None:
        rows = ",".join(itertools.repeat(_EVENT_ROW, size))
        sql = _INSERT + (f"{_META_ROW},{rows}" if meta else rows)
        _STATEMENTS[size, meta] = sql
    return sql


def _json_array(items: list[Any]) -> str | None:
    return json.dumps(items, ensure_ascii=False, separators=(",", ":")) if items else None


def nul_free(plan: Plan) -> bool:
    """Whether no id in *plan*'s creates or checkpoints holds a NUL (SQLite's JSON functions
    stop at one), so that it may be written as one statement; event rows are bound as given."""
    if not (plan.creates or plan.auto_creates or plan.checkpoints):
        return True
    ids = [checkpoint[0] for checkpoint in plan.checkpoints]
    for session_id, parent_id, _, _ in plan.creates:
        ids.append(session_id)
        if parent_id:
            ids.append(parent_id)
    ids.extend(create[0] for create in plan.auto_creates)
    return "\x00" not in "".join(ids)


def install_group_write(conn: sqlite3.Connection) -> bool:
    """Create the connection-local group statement; False if this SQLite cannot run it (no JSON
    functions, or too few bound parameters allowed), in which case groups are written statement
    by statement."""
    if conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) < 4 + _EVENT_WIDTH * MAX_ROWS:
        return False
    try:
        for statement in _GROUP_DDL:
            conn.execute(statement)
        # Prepare and run it once (it writes nothing) to find a missing function now.
        conn.execute("BEGIN")
        try:
            conn.execute(_statement(1, True), (0, "[]", "[]", "[]", *_PADDING[:_EVENT_WIDTH]))
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        return False
    return True


def group_statement(plan: Plan) -> tuple[str, list[object]] | None:
    """The one statement that writes *plan*, and its parameters (made on the trio thread); None
    if it has more than :data:`MAX_ROWS` event and head rows, or nothing to write."""
    rows = plan.rows
    count = len(rows) + len(plan.heads)
    if count > MAX_ROWS:
        return None
    meta = bool(plan.creates or plan.auto_creates or plan.checkpoints)
    if meta:
        parameters: list[object] = [
            plan.ts_ms,
            _json_array([[session_id, parent_id] for session_id, parent_id, _, _ in plan.creates]),
            _json_array([session_id for session_id, _, _, _ in plan.auto_creates]),
            _json_array([list(checkpoint) for checkpoint in plan.checkpoints]),
        ]
        parameters.extend(itertools.chain.from_iterable(rows))
    elif count:
        parameters = list(itertools.chain.from_iterable(rows))
    else:
        return None
    parameters.extend(
        itertools.chain.from_iterable(
            [(session_id, seq, None, None, None, digest) for seq, digest, session_id in plan.heads]
        )
    )
    size = 1
    for size in _SIZES:
        if size >= count:
            break
    if size > count:
        parameters.extend(_PADDING[: _EVENT_WIDTH * (size - count)])
    return _statement(size, meta), parameters
