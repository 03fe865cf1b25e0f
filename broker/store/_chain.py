"""The per-session hash chain that makes a store's event log tamper-evident.

Each row of a session stores ``prev_hash`` (the ``hash`` of the row before it, or
:data:`GENESIS` for seq 1) and its own ``hash``: sha256 over a canonical, length-prefixed byte
form of (session id, seq, wall-clock ms, the exact JSON line, prev_hash). Changing, deleting,
reordering or inserting a row breaks either that row's hash or the next row's link.

Invariant: the byte form below is part of the on-disk format (schema version 1); changing it
needs a new schema version.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = ["GENESIS", "HASH_SIZE", "chain_hash"]

HASH_SIZE = 32
GENESIS = bytes(HASH_SIZE)
_DOMAIN = b"broker-event-chain-v1\x00"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


def chain_hash(session_id: str, seq: int, ts_ms: int, line: str, prev_hash: bytes) -> bytes:
    """The hash of one row; *prev_hash* is the previous row's hash (:data:`GENESIS` for seq 1).

    The hashed bytes: a domain tag, then len-prefixed (u32) session id, seq (u64), ts_ms (i64),
    len-prefixed line, prev_hash — all big-endian, strings UTF-8.
    """
    if len(prev_hash) != HASH_SIZE:
        raise ValueError(f"prev_hash must be {HASH_SIZE} bytes, got {len(prev_hash)}")
    sid = session_id.encode()
    text = line.encode()
    return hashlib.sha256(
        b"".join(
            (
                _DOMAIN,
                _U32.pack(len(sid)),
                sid,
                _U64.pack(seq),
                _I64.pack(ts_ms),
                _U32.pack(len(text)),
                text,
                prev_hash,
            )
        )
    ).digest()
