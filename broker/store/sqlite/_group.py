"""How one commit group is written to SQLite: its SQL, one statement or several.

A group is written as ONE SQL statement when SQLite has JSON functions and no session id holds a
NUL: an INSERT into a connection-local view whose trigger reads the group's creates, rows, heads
and checkpoints from JSON arrays (:func:`install_group_write`, :func:`group_parameters`). Else it
is written statement by statement with the plain statements below.
"""

from __future__ import annotations

import json
import sqlite3
from json.encoder import encode_basestring as _escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._plan import Plan

__all__ = [
    "AUTO_CREATE_SQL",
    "CHECKPOINT_SQL",
    "CREATE_SQL",
    "GROUP_SQL",
    "HEAD_SQL",
    "INSERT_SQL",
    "group_parameters",
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
    "INSERT INTO events (id, session_id, seq, ts_ms, line, prev_hash, hash, prev_row) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
HEAD_SQL = "UPDATE sessions SET head_seq = ?, head_hash = ?, head_row = ? WHERE id = ?"
CHECKPOINT_SQL = (
    "INSERT INTO checkpoints (session_id, seq, state, projection) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state, "
    "projection = excluded.projection"
)

# The whole group as ONE statement: an INSERT into a connection-local (TEMP) view whose INSTEAD
# OF trigger does what the statements above do, reading the group from JSON arrays and blobs.
# SQLite runs it in C with the GIL released from start to COMMIT, instead of re-taking the GIL
# for every row of an executemany — so the trio thread stages the next group in parallel. In
# autocommit mode the statement is its own transaction (all or nothing, fsynced at its end with
# synchronous=FULL). Nothing of this is stored in the file. Parameters (NULL when empty):
#   creates [[id, parent_id], ...]   auto_creates [id, ...]
#   checkpoints [[id, seq, state, fp], ...]
#   rows ["session_id", ...] (one per row)   heads ["session_id", ...] (one per session moved)
#   row_meta, head_meta: each row's, each head's fixed-width ASCII numbers (_ROW, _HEAD), read
#     by substr (O(1) on a blob) and CAST: a row's seq, the index of its session's previous row
#     in rows (-1: none in this group) and its line's start and length in lines; a head's seq
#     and the index of its row
#   lines: the rows' lines, UTF-8, end to end   prev_hashes, hashes: 32 bytes per row
# A row is read by json_each of rows (its session id is the element itself): nothing per row
# is parsed from JSON again, where [session_id, seq, line] elements were parsed once per field
# (the line twice over: it is JSON in JSON, every quote escaped). The row at index i gets the
# id base + i (base: the writer's next id, added on its thread); a session's first row in the
# group links to the session's head row before the group.
_ROW_SEQ, _ROW_PREV, _ROW_START, _ROW_LENGTH = 12, 7, 12, 12
_ROW = b"%012d%07d%012d%012d"
_ROW_WIDTH = _ROW_SEQ + _ROW_PREV + _ROW_START + _ROW_LENGTH
_HEAD = b"%012d%07d"
_HEAD_WIDTH = 12 + 7
# What the widths hold: a group with more rows, a seq or a group of lines past them (an import
# of millions of events is one group) is written statement by statement, never misaligned.
_MAX_ROWS = 10 ** (_ROW_PREV - 1)  # an index, and -1, in 7 characters
_MAX_NUMBER = 10**_ROW_SEQ  # a seq, a line's start or length in 12 digits


def _field(blob: str, width: int, offset: int, size: int, index: str = "key") -> str:
    """SQL for the integer at *offset* (of *size* digits) of element *index* of *blob*."""
    return f"CAST(substr(NEW.{blob}, {index} * {width} + {offset + 1}, {size}) AS INTEGER)"


_SEQ = _field("row_meta", _ROW_WIDTH, 0, _ROW_SEQ)
_PREV = _field("row_meta", _ROW_WIDTH, _ROW_SEQ, _ROW_PREV)
_START = _field("row_meta", _ROW_WIDTH, _ROW_SEQ + _ROW_PREV, _ROW_START)
_LENGTH = _field("row_meta", _ROW_WIDTH, _ROW_SEQ + _ROW_PREV + _ROW_START, _ROW_LENGTH)
_HEAD_SEQ = _field("head_meta", _HEAD_WIDTH, 0, 12, "heads.key")
_HEAD_INDEX = _field("head_meta", _HEAD_WIDTH, 12, 7, "heads.key")
_GROUP_DDL = (
    "PRAGMA temp_store = MEMORY",
    "CREATE TEMP VIEW group_write (creates, auto_creates, rows, row_meta, lines, prev_hashes, "
    "hashes, heads, head_meta, checkpoints, ts_ms, base) AS SELECT NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    f"""CREATE TEMP TRIGGER group_write_rows INSTEAD OF INSERT ON group_write BEGIN
        INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), NEW.ts_ms, 0,
                zeroblob(32)
            FROM json_each(NEW.creates) WHERE true
            ON CONFLICT (id) DO UPDATE SET parent_id = excluded.parent_id;
        INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash)
            SELECT value, NULL, NEW.ts_ms, 0, zeroblob(32) FROM json_each(NEW.auto_creates)
            WHERE true ON CONFLICT (id) DO NOTHING;
        INSERT INTO events (id, session_id, seq, ts_ms, line, prev_hash, hash, prev_row)
            SELECT NEW.base + key, value, {_SEQ}, NEW.ts_ms,
                CAST(substr(NEW.lines, {_START} + 1, {_LENGTH}) AS TEXT),
                substr(NEW.prev_hashes, key * 32 + 1, 32), substr(NEW.hashes, key * 32 + 1, 32),
                CASE WHEN {_PREV} >= 0 THEN NEW.base + {_PREV}
                    ELSE (SELECT head_row FROM sessions WHERE id = value)
                END
            FROM json_each(NEW.rows);
        UPDATE sessions SET head_seq = {_HEAD_SEQ},
                head_hash = substr(NEW.hashes, {_HEAD_INDEX} * 32 + 1, 32),
                head_row = NEW.base + {_HEAD_INDEX}
            FROM json_each(NEW.heads) AS heads WHERE sessions.id = heads.value;
        INSERT INTO checkpoints (session_id, seq, state, projection)
            SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
                json_extract(value, '$[2]'), json_extract(value, '$[3]')
            FROM json_each(NEW.checkpoints) WHERE true
            ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq, state = excluded.state,
                projection = excluded.projection;
    END""",
)
GROUP_SQL = "INSERT INTO temp.group_write VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


def _json_array(items: list[Any]) -> str | None:
    return json.dumps(items, ensure_ascii=False, separators=(",", ":")) if items else None


def nul_free(plan: Plan) -> bool:
    """Whether no session or parent id that *plan* creates or checkpoints holds a NUL (SQLite's
    JSON functions stop at one); :func:`group_parameters` checks the ids of its rows."""
    if not (plan.creates or plan.auto_creates or plan.checkpoints):
        return True
    # Checkpoints may name sessions without rows (at close); heads never do.
    ids = [checkpoint[0] for checkpoint in plan.checkpoints]
    for session_id, parent_id, _, _ in plan.creates:
        ids.append(session_id)
        if parent_id:
            ids.append(parent_id)
    ids.extend(create[0] for create in plan.auto_creates)
    return "\x00" not in "".join(ids)


def install_group_write(conn: sqlite3.Connection) -> bool:
    """Create the connection-local group statement; False if this SQLite cannot run it (no JSON
    functions, or older than 3.33), in which case groups are written statement by statement."""
    try:
        for statement in _GROUP_DDL:
            conn.execute(statement)
        # Prepare and run it once (it writes nothing) to find a missing function now.
        conn.execute("BEGIN")
        try:
            conn.execute(GROUP_SQL, (None, None, None, b"", b"", b"", b"", None, b"", None, 0, 1))
        finally:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        return False
    return True


def group_parameters(plan: Plan) -> tuple[object, ...] | None:
    """The parameters of :data:`GROUP_SQL` for *plan* but the last (the group's first id, which
    the writer adds on its thread), made on the trio thread; None if the id of a session with
    rows holds a NUL (then it is written statement by statement).

    Session ids are escaped by :func:`json.encoder.encode_basestring` (the C escaper
    ``json.dumps`` itself uses), once per session; lines are only encoded: every durable row
    passes here, on the trio thread."""
    rows = plan.rows
    if len(rows) >= _MAX_ROWS:
        return None
    escaped: dict[str, str] = {}  # each session id, escaped once
    index: dict[str, int] = {}  # the last row of each session
    last = index.get
    sids: list[str] = []
    meta: list[bytes] = []
    lines: list[bytes] = []
    start = 0
    for position, (session_id, seq, _, line, _, _) in enumerate(rows):
        sid = escaped.get(session_id)
        if sid is None:
            if "\x00" in session_id:
                return None
            sid = escaped[session_id] = _escape(session_id)
        try:
            data = line.encode()
        except UnicodeEncodeError:  # no codec writes a lone surrogate; let SQLite refuse it
            return None
        sids.append(sid)
        meta.append(_ROW % (seq, last(session_id, -1), start, len(data)))
        lines.append(data)
        start += len(data)
        index[session_id] = position
    heads = plan.heads
    if start >= _MAX_NUMBER or any(seq >= _MAX_NUMBER for seq, _, _ in heads):
        return None
    return (
        _json_array([[session_id, parent_id] for session_id, parent_id, _, _ in plan.creates]),
        _json_array([session_id for session_id, _, _, _ in plan.auto_creates]),
        f"[{','.join(sids)}]" if sids else None,
        b"".join(meta),
        b"".join(lines),
        b"".join([row[4] for row in rows]),
        b"".join([row[5] for row in rows]),
        f"[{','.join([escaped[sid] for _, _, sid in heads])}]" if heads else None,
        b"".join([_HEAD % (seq, index[sid]) for seq, _, sid in heads]),
        _json_array([list(checkpoint) for checkpoint in plan.checkpoints]),
        plan.ts_ms,
    )
