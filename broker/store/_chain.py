"""The per-session hash chain that makes a store's event log tamper-evident.

Each row of a session stores ``prev_hash`` (the ``hash`` of the row before it, or
:data:`GENESIS` for seq 1) and its own ``hash``: sha256 over a canonical, length-prefixed byte
form of (session id, seq, wall-clock ms, the exact JSON line, prev_hash). Changing, deleting,
reordering or inserting a row breaks either that row's hash or the next row's link.

Invariant: the byte form below is part of the on-disk format (SQLite schema versions 1 and 2,
PostgreSQL's 1 and 2: unchanged by either migration); changing it needs a new schema version.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable

__all__ = ["GENESIS", "HASH_SIZE", "chain_hash", "chain_hash_after", "chain_prefix", "chain_rows"]

HASH_SIZE = 32
GENESIS = bytes(HASH_SIZE)
_DOMAIN = b"broker-event-chain-v1\x00"
_U32 = struct.Struct(">I")
_SEQ_TS_LEN = struct.Struct(">QqI")  # seq (u64), ts_ms (i64), the line's length (u32)


def chain_prefix(session_id: str) -> bytes:
    """The bytes every row hash of *session_id* starts with (see :func:`chain_hash`)."""
    sid = session_id.encode()
    return _DOMAIN + _U32.pack(len(sid)) + sid


def chain_hash(session_id: str, seq: int, ts_ms: int, line: str, prev_hash: bytes) -> bytes:
    """The hash of one row; *prev_hash* is the previous row's hash (:data:`GENESIS` for seq 1).

    The hashed bytes: a domain tag, then len-prefixed (u32) session id, seq (u64), ts_ms (i64),
    len-prefixed line, prev_hash — all big-endian, strings UTF-8.
    """
    return chain_hash_after(chain_prefix(session_id), seq, ts_ms, line, prev_hash)


def chain_hash_after(prefix: bytes, seq: int, ts_ms: int, line: str, prev_hash: bytes) -> bytes:
    """:func:`chain_hash` with the session's :func:`chain_prefix` already made (for one row;
    the writer chains a request's rows with :func:`chain_rows`)."""
    if len(prev_hash) != HASH_SIZE:
        raise ValueError(f"prev_hash must be {HASH_SIZE} bytes, got {len(prev_hash)}")
    text = line.encode()
    return hashlib.sha256(
        b"".join((prefix, _SEQ_TS_LEN.pack(seq, ts_ms, len(text)), text, prev_hash))
    ).digest()


def chain_rows(
    session_id: str,
    prefix: bytes,
    seq: int,
    ts_ms: int,
    lines: Iterable[str],
    prev_hash: bytes,
    add_row: Callable[[tuple[str, int, int, str, bytes, bytes]], object],
) -> tuple[int, bytes]:
    """Chain *lines* after the row (*seq*, *prev_hash*) of *session_id*, whose
    :func:`chain_prefix` is *prefix*: hand ``add_row`` each new row ``(session_id, seq, ts_ms,
    line, prev_hash, hash)`` and return the last seq and hash. The hashes are
    :func:`chain_hash_after`'s, made inline (the writer chains every durable row here)."""
    if len(prev_hash) != HASH_SIZE:
        raise ValueError(f"prev_hash must be {HASH_SIZE} bytes, got {len(prev_hash)}")
    pack = _SEQ_TS_LEN.pack
    sha256 = hashlib.sha256
    join = b"".join
    for line in lines:
        seq += 1
        text = line.encode()
        digest = sha256(join((prefix, pack(seq, ts_ms, len(text)), text, prev_hash))).digest()
        add_row((session_id, seq, ts_ms, line, prev_hash, digest))
        prev_hash = digest
    return seq, prev_hash
