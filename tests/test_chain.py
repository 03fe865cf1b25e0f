"""The hash chain's batch form (what the writer runs on every durable row) against its
definition, row by row."""

from __future__ import annotations

import hashlib

import pytest

from broker.store._chain import GENESIS, chain_hash, chain_prefix, chain_rows


def test_chain_hash_is_the_documented_byte_form() -> None:
    # Built by hand from the module's description, not from its structs: the on-disk format.
    sid, line, prev = "sé", '{"type":"a","data":{"x":"✓"}}', bytes(range(32))
    expected = hashlib.sha256(
        b"broker-event-chain-v1\x00"
        + len(sid.encode()).to_bytes(4, "big")
        + sid.encode()
        + (42).to_bytes(8, "big")
        + (-5).to_bytes(8, "big", signed=True)
        + len(line.encode()).to_bytes(4, "big")
        + line.encode()
        + prev
    ).digest()
    assert chain_hash(sid, 42, -5, line, prev) == expected


def test_chain_rows_hashes_each_row_as_chain_hash_defines_it() -> None:
    lines = ['{"type":"a"}', '{"type":"b","data":{"x":"é ✓ \\u0000"}}', "", "x" * 70_000]
    rows: list[tuple[str, int, int, str, bytes, bytes]] = []
    last = chain_rows("sé", chain_prefix("sé"), 41, 1_700_000_000_123, lines, GENESIS, rows.append)
    prev = GENESIS
    for offset, (line, row) in enumerate(zip(lines, rows, strict=True)):
        seq = 42 + offset
        digest = chain_hash("sé", seq, 1_700_000_000_123, line, prev)
        assert row == ("sé", seq, 1_700_000_000_123, line, prev, digest)
        prev = digest
    assert last == (45, prev)


def test_chain_rows_of_no_lines_leaves_the_head_as_it_was() -> None:
    rows: list[tuple[str, int, int, str, bytes, bytes]] = []
    assert chain_rows("s", chain_prefix("s"), 7, 0, [], b"\x01" * 32, rows.append) == (
        7,
        b"\x01" * 32,
    )
    assert rows == []


def test_chain_rows_refuses_a_previous_hash_of_the_wrong_size() -> None:
    rows: list[tuple[str, int, int, str, bytes, bytes]] = []
    with pytest.raises(ValueError, match="prev_hash must be 32 bytes, got 3"):
        chain_rows("s", chain_prefix("s"), 0, 0, ["{}"], b"abc", rows.append)
    assert rows == []
