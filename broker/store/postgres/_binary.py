"""A group's array parameters, encoded once in PostgreSQL's binary array format.

psycopg adapts a Python list by inspecting it on every ``execute`` (which element type, which
dumper, then one dumper call per element, all in Python): for the group statement's 17 arrays
that cost ~0.34 ms per group on the writer's thread with the GIL held — a fifth of the round
trip a lone ``decided`` pays (issue 23's answer latency). Here each array is encoded straight
into the format ``array_recv`` reads, on the trio thread where the group is staged, and handed
to psycopg as a value whose dumper returns it as is.

Synopsis::

    register(conn.adapters)                          # once per connection
    conn.execute("SELECT %(ids)b::text[]", {"ids": text_array(["a", "b"])})

The format (PostgreSQL's ``array_send``): ``int32 ndim``, ``int32 flags`` (1 if any element is
NULL), ``uint32`` element type OID, then per dimension ``int32 size, int32 lower bound`` (1),
then per element ``int32 length`` (-1 for NULL) and its bytes in the element type's binary
form: UTF-8 text for ``text`` (the writer's connections use ``client_encoding`` UTF8), the
bytes for ``bytea``, a big-endian ``int64`` for ``int8``. An empty array has ``ndim`` 0 and no
dimensions. Text holding a NUL cannot be sent at all: such an array fails in ``execute``, as
psycopg's own dumper does, so the group fails like any refused statement.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

import psycopg
from psycopg import pq
from psycopg.adapt import Dumper

if TYPE_CHECKING:
    from psycopg.adapt import AdaptersMap

__all__ = [
    "ByteaArray",
    "Int8Array",
    "TextArray",
    "bytea_array",
    "int8_array",
    "register",
    "text_array",
]

#: Element and array type OIDs (``pg_type``; fixed for built-in types).
TEXT_OID, BYTEA_OID, INT8_OID = 25, 17, 20
TEXT_ARRAY_OID, BYTEA_ARRAY_OID, INT8_ARRAY_OID = 1009, 1001, 1016

_HEADER = struct.Struct(">iiIii")  # ndim 1, flags, element OID, size, lower bound 1
_EMPTY = struct.Struct(">iiI")  # ndim 0, flags 0, element OID
_ONE = struct.Struct(">iiIiii")  # a one-element array's header and its element's length
_ONE_INT8 = struct.Struct(">iiIiiiq")
_LENGTH = struct.Struct(">i")
_NULL = _LENGTH.pack(-1)
_NUL_MESSAGE = "PostgreSQL text fields cannot contain NUL (0x00) bytes"


class TextArray(bytes):
    """A ``text[]`` in binary form (:func:`text_array`)."""


class ByteaArray(bytes):
    """A ``bytea[]`` in binary form (:func:`bytea_array`)."""


class Int8Array(bytes):
    """An ``int8[]`` in binary form (:func:`int8_array`)."""


class _NulTextArray(TextArray):
    """A ``text[]`` with a NUL in an element: its dumper refuses it, as psycopg's does."""


def _varlena(oid: int, items: Sequence[bytes | None]) -> bytes:
    if len(items) == 1 and (item := items[0]) is not None:
        return _ONE.pack(1, 0, oid, 1, 1, len(item)) + item
    count = len(items)
    if None not in items:
        # Lengths and values interleaved by C loops: no Python frame per element.
        parts: list[bytes | None] = [None] * (2 * count)
        parts[0::2] = map(_LENGTH.pack, map(len, items))  # type: ignore[arg-type]
        parts[1::2] = items
        return _HEADER.pack(1, 0, oid, count, 1) + b"".join(parts)  # type: ignore[arg-type]
    out = [_HEADER.pack(1, 1, oid, count, 1)]
    for item in items:
        out.append(_NULL if item is None else _LENGTH.pack(len(item)) + item)
    return b"".join(out)


def text_array(values: Sequence[str | None]) -> TextArray:
    """*values* as a binary ``text[]`` (UTF-8; None is NULL)."""
    if not values:
        return _EMPTY_TEXT
    if len(values) == 1 and (value := values[0]) is not None:
        item = value.encode()
        data = _ONE.pack(1, 0, TEXT_OID, 1, 1, len(item)) + item
        return _NulTextArray(data) if "\x00" in value else TextArray(data)
    encoded = [None if v is None else v.encode() for v in values]
    data = _varlena(TEXT_OID, encoded)
    if "\x00" in "".join(v for v in values if v is not None):
        return _NulTextArray(data)
    return TextArray(data)


def bytea_array(values: Sequence[bytes | None]) -> ByteaArray:
    """*values* as a binary ``bytea[]`` (None is NULL)."""
    if not values:
        return _EMPTY_BYTEA
    return ByteaArray(_varlena(BYTEA_OID, values))


@functools.lru_cache(maxsize=64)
def _int8s(count: int) -> struct.Struct:
    # One struct per length: the header, then (length 8, value) per element.
    return struct.Struct(">iiIii" + "iq" * count)


def int8_array(values: Sequence[int | None]) -> Int8Array:
    """*values* as a binary ``int8[]`` (None is NULL; each value must fit 64 bits)."""
    count = len(values)
    if count == 1 and (value := values[0]) is not None:
        return Int8Array(_ONE_INT8.pack(1, 0, INT8_OID, 1, 1, 8, value))
    if not count:
        return _EMPTY_INT8
    if None in values or count > 1024:
        return Int8Array(
            _varlena(
                INT8_OID,
                [None if v is None else v.to_bytes(8, "big", signed=True) for v in values],
            )
        )
    pairs = itertools.chain.from_iterable(zip(itertools.repeat(8), values, strict=False))
    return Int8Array(_int8s(count).pack(1, 0, INT8_OID, count, 1, *pairs))


_EMPTY_TEXT = TextArray(_EMPTY.pack(0, 0, TEXT_OID))
_EMPTY_BYTEA = ByteaArray(_EMPTY.pack(0, 0, BYTEA_OID))
_EMPTY_INT8 = Int8Array(_EMPTY.pack(0, 0, INT8_OID))


class _Encoded(Dumper):
    """Sends an already encoded array as it is."""

    format = pq.Format.BINARY

    def dump(self, obj: object) -> bytes:
        assert isinstance(obj, bytes)
        return obj


class _TextArrayDumper(_Encoded):
    oid = TEXT_ARRAY_OID


class _ByteaArrayDumper(_Encoded):
    oid = BYTEA_ARRAY_OID


class _Int8ArrayDumper(_Encoded):
    oid = INT8_ARRAY_OID


class _NulTextArrayDumper(_TextArrayDumper):
    def dump(self, obj: object) -> bytes:
        raise psycopg.DataError(_NUL_MESSAGE)


def register(adapters: AdaptersMap) -> None:
    """Teach *adapters* (a connection's) to send the arrays of this module."""
    adapters.register_dumper(TextArray, _TextArrayDumper)
    adapters.register_dumper(_NulTextArray, _NulTextArrayDumper)
    adapters.register_dumper(ByteaArray, _ByteaArrayDumper)
    adapters.register_dumper(Int8Array, _Int8ArrayDumper)
