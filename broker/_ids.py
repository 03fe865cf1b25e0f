"""Fresh request ids: UUID4 strings cut from a buffered pool of OS randomness.

``str(uuid.uuid4())`` makes one ``urandom`` system call per id, which is a visible part of an
in-memory ask; reading 4 KiB at a time and setting the version/variant bits ourselves gives the
same ids (RFC 4122 version 4, 122 random bits from the OS CSPRNG) at a fraction of the cost.
"""

from __future__ import annotations

import os

__all__ = ["new_id"]

_POOL_BYTES = 4096
_pool = b""
_offset = _POOL_BYTES


def _reset_after_fork() -> None:
    # A forked child must not hand out the ids its parent will hand out.
    global _pool, _offset
    _pool, _offset = b"", _POOL_BYTES


os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """A fresh UUID4 string."""
    global _pool, _offset
    if _offset >= len(_pool):
        _pool, _offset = os.urandom(_POOL_BYTES), 0
    raw = bytearray(_pool[_offset : _offset + 16])
    _offset += 16
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
