"""The group's arrays in PostgreSQL's binary format (``broker/store/postgres/_binary.py``): what
the server reads back is what was encoded, for every shape a group has (empty, one element,
many, NULLs, non-ASCII, 64-bit extremes), and text with a NUL is refused at ``execute`` as
psycopg's own dumper refuses it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._binary import (  # noqa: E402
    bytea_array,
    int8_array,
    register,
    text_array,
)


@pytest.fixture(scope="module")
def conn(postgres_server: str) -> Iterator[Any]:
    with psycopg.connect(postgres_server, autocommit=True) as connection:
        connection.execute("SET client_encoding = 'UTF8'")
        register(connection.adapters)
        yield connection


def _back(conn: Any, cast: str, value: object) -> Any:
    row = conn.execute(f"SELECT %(v)b::{cast}", {"v": value}).fetchone()
    assert row is not None
    return row[0]


def test_the_layout_is_array_send_s() -> None:
    # Pinned by hand from the format: ndim, flags, element OID, size, lower bound, then
    # (length, bytes) per element; NULL is length -1 and sets the flag; empty has ndim 0.
    assert text_array(["ab"]) == struct.pack(">iiIiii", 1, 0, 25, 1, 1, 2) + b"ab"
    assert text_array(["a", "bc"]) == (
        struct.pack(">iiIii", 1, 0, 25, 2, 1) + struct.pack(">i", 1) + b"a"
        + struct.pack(">i", 2) + b"bc"
    )  # fmt: skip
    assert bytea_array([b"\x00", None]) == (
        struct.pack(">iiIii", 1, 1, 17, 2, 1) + struct.pack(">i", 1) + b"\x00"
        + struct.pack(">i", -1)
    )  # fmt: skip
    assert int8_array([-2]) == struct.pack(">iiIiiiq", 1, 0, 20, 1, 1, 8, -2)
    assert int8_array([None, 3]) == (
        struct.pack(">iiIii", 1, 1, 20, 2, 1) + struct.pack(">i", -1) + struct.pack(">iq", 8, 3)
    )
    assert text_array([]) == struct.pack(">iiI", 0, 0, 25)
    assert int8_array([]) == struct.pack(">iiI", 0, 0, 20)
    assert bytea_array([]) == struct.pack(">iiI", 0, 0, 17)


@pytest.mark.parametrize(
    "values",
    [[], ["s"], ["", "ünïcode \u2028 😀", "x" * 70_000], [None, "a"], ["a", None, None]],
)
def test_text_arrays_read_back_as_sent(conn: Any, values: list[str | None]) -> None:
    assert _back(conn, "text[]", text_array(values)) == values


@pytest.mark.parametrize(
    "values",
    [[], [0], [2**63 - 1, -(2**63), 1, -1], [None], [5, None, 7], list(range(2000))],
)
def test_int8_arrays_read_back_as_sent(conn: Any, values: list[int | None]) -> None:
    assert _back(conn, "int8[]", int8_array(values)) == values


@pytest.mark.parametrize("values", [[], [b""], [b"\x00" * 32, None, b"\xff"], [None]])
def test_bytea_arrays_read_back_as_sent(conn: Any, values: list[bytes | None]) -> None:
    assert _back(conn, "bytea[]", bytea_array(values)) == values


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    texts=st.lists(
        st.none()
        | st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
    ),
    ints=st.lists(st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    blobs=st.lists(st.none() | st.binary(max_size=40)),
)
def test_any_array_reads_back_as_sent(
    conn: Any, texts: list[str | None], ints: list[int | None], blobs: list[bytes | None]
) -> None:
    row = conn.execute(
        "SELECT %(t)b::text[], %(i)b::int8[], %(b)b::bytea[]",
        {"t": text_array(texts), "i": int8_array(ints), "b": bytea_array(blobs)},
    ).fetchone()
    assert row == (texts, ints, blobs)


@pytest.mark.parametrize("values", [["a\x00b"], ["ok", "nul \x00 here"]])
def test_text_with_a_nul_is_refused_when_sent(conn: Any, values: list[str]) -> None:
    with pytest.raises(psycopg.DataError, match="NUL"):
        conn.execute("SELECT %(v)b::text[]", {"v": text_array(values)})
