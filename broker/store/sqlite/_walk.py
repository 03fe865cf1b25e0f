"""How a session's rows are found in a store file of schema version 2: by walking its chain.

Version 2 has no index on the session (:mod:`._schema`): a session's last row is
``sessions.head_row``, and every row names the one before it (``prev_row``). A walk starts at
the head and follows ``prev_row`` back, one primary-key lookup per row, while the rows still
belong to the session, the ids go down (so a damaged link ends the walk instead of looping)
and the row is still wanted; the rows found come back in seq order. A link that was broken
behind the store's back ends the walk early, and what reads the rows (a fold, ``broker log
verify``) reports the seqs that are missing.

The writer's own reads (the tails folded at open, a session loaded for ``session/load``, the
asks still pending) use these walks; read-only tools that must see every row a file holds,
linked or not, use :mod:`._reader`'s session index instead.
"""

from __future__ import annotations

__all__ = [
    "ASKED_IDS_SQL",
    "CHAIN_CHECK_SQL",
    "CHAIN_SQL",
    "DECIDED_SINCE_SQL",
    "LINES_SQL",
    "TAIL_SQL",
]


def _walk(columns: str, *, keep_walking: str, wanted: str) -> str:
    """A walk of session ``?1`` from its head, going on past a row while *keep_walking* holds
    for it (``e`` is the row), returning *columns* of the rows where *wanted* holds, in seq
    order. Each step reads the next row once, carrying its columns along."""
    row = (
        "{t}.id, {t}.session_id, {t}.seq, {t}.ts_ms, {t}.line, {t}.prev_hash, {t}.hash, "
        "{t}.prev_row"
    )
    return (
        "WITH RECURSIVE e(id, session_id, seq, ts_ms, line, prev_hash, hash, prev_row) AS ("
        f"SELECT {row.format(t='h')} FROM sessions AS s JOIN events AS h ON h.id = s.head_row "
        "WHERE s.id = ?1 AND h.session_id = ?1 "
        "UNION ALL "
        f"SELECT {row.format(t='n')} FROM e JOIN events AS n ON n.id = e.prev_row "
        f"WHERE e.prev_row < e.id AND n.session_id = ?1 AND {keep_walking}) "
        f"SELECT {columns} FROM e WHERE {wanted} ORDER BY e.seq"
    )


#: ``(seq, line, hash)`` of session ``?1``'s rows after seq ``?2`` (the tail a fold reads).
TAIL_SQL = _walk("e.seq, e.line, e.hash", keep_walking="e.seq > ?2 + 1", wanted="e.seq > ?2")

#: ``(seq, line)`` of every row of session ``?1``.
LINES_SQL = _walk("e.seq, e.line", keep_walking="true", wanted="true")

#: ``(seq, ts_ms, line, prev_hash, hash)`` of every row of session ``?1`` (a read-only tool's
#: one session, :meth:`._reader.SqliteReader.linked_rows`).
CHAIN_SQL = _walk("e.seq, e.ts_ms, e.line, e.prev_hash, e.hash", keep_walking="true", wanted="true")

#: Whether session ``?1``'s walk is its whole chain: how many rows it reached, how many distinct
#: seqs, the smallest and largest seq, and whether seq 1 links to nothing. Whole when all four
#: numbers are its ``head_seq`` (or 1 for the smallest) and seq 1 ends it.
CHAIN_CHECK_SQL = _walk(
    "count(*), count(DISTINCT e.seq), min(e.seq), max(e.seq), "
    "coalesce(max(e.seq = 1 AND e.prev_row IS NULL), 0)",
    keep_walking="true",
    wanted="true",
)

#: The ids of session ``?1``'s ``approval/asked`` rows, in seq order.
ASKED_IDS_SQL = _walk(
    "json_extract(e.line, '$.data.id')",
    keep_walking="true",
    wanted="json_extract(e.line, '$.type') = 'approval/asked'",
)

#: The outcome of question ``?3`` if session ``?1`` decided it in a row stamped no earlier than
#: a minute before ``?2`` (the walk stops at the first older row; the asking process writes both
#: stamps, with one clock). Only rows that contain the id are parsed.
DECIDED_SINCE_SQL = _walk(
    "json_extract(e.line, '$.data.outcome')",
    keep_walking="e.ts_ms >= ?2 - 60000",
    wanted=(
        "e.ts_ms >= ?2 - 60000 AND instr(e.line, ?3) > 0 "
        "AND json_extract(e.line, '$.type') = 'approval/decided' "
        "AND json_extract(e.line, '$.data.id') = ?3"
    ),
)
