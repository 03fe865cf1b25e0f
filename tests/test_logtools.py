"""``broker log``'s library: show, verify (tamper evidence, invariants), export, import."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
import trio

from broker._codec import EventDecodeError, decode_event, encode_event
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    Event,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker._vocabulary import Outcome, Policy
from broker.store import StoreOpenError
from broker.store._chain import chain_hash
from broker.store._logtools import (
    ImportLineError,
    LogToolError,
    TimelineEntry,
    VerifyError,
    export_all,
    import_file,
    list_sessions,
    parse_jsonl,
    session_file_name,
    session_id_from_file_name,
    session_lines,
    show_session,
    verify_store,
)
from broker.store._stage import SessionExistsError
from broker.store.sqlite import open_sqlite_store

COMPLETED = TurnEndReason(kind="completed")
GOOD: list[Event] = [
    TurnStart(turn=1),
    ApprovalAsked(id="q1", tool_name="bash", reason="rm -rf build"),
    ApprovalDecided(id="q1", outcome=Outcome.ALLOWED_ONCE),
    ApprovalGrant(tool_name="bash"),
    TurnEnd(turn=1, reason=COMPLETED),
]


def _codec_reason(line: str) -> str:
    """The codec's own reason for refusing *line* (its wording is the codec's to choose)."""
    with pytest.raises(EventDecodeError) as caught:
        decode_event(line)
    return str(caught.value)


def _clock(*ticks: int) -> object:
    values = iter(ticks)
    return lambda: next(values)


async def _store(path: Path, logs: dict[str, list[Event]], *, checkpoint_every: int = 0) -> None:
    """Write each session's events one append at a time (no invariants are enforced)."""
    async with open_sqlite_store(path, checkpoint_every=checkpoint_every) as store:
        for session_id, events in logs.items():
            await store.create_session(session_id, None)
            for event in events:
                await store.append(session_id, [event])


def _sql(path: Path, *statements: str, params: tuple[object, ...] = ()) -> None:
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement, params if "?" in statement else ())
        conn.commit()
    finally:
        conn.close()


def _violation(path: Path, message: str) -> str:
    full = f"store file '{path}': {message}"
    return rf"^{re.escape(full)}$"


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A store with two well-formed sessions (written by its own trio run, so that sync and
    async tests can share it)."""
    path = tmp_path / "store.db"

    async def write() -> None:
        with trio.fail_after(10):
            await _store(path, {"s": GOOD, "t": GOOD})

    trio.run(write)
    return path


# ----------------------------------------------------------------------- verify


def test_verify_passes_with_a_one_line_summary(good: Path) -> None:
    summary = verify_store(good)
    assert summary.summary() == (
        "ok: 2 sessions, 10 events, 0 checkpoints verified (hash chains, turn order, turn "
        "enclosure, pairing, checkpoints)"
    )


def test_verify_detects_a_modified_row(good: Path) -> None:
    line = encode_event(ApprovalDecided(id="q1", outcome=Outcome.REJECTED))
    _sql(good, "UPDATE events SET line = ? WHERE session_id = 's' AND seq = 3", params=(line,))
    message = (
        "session 's' seq 3: rule chain: hash does not match the row's content (the row was "
        "modified)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)) as caught:
        verify_store(good)
    assert (caught.value.violation.seq, caught.value.violation.rule) == (3, "chain")


def test_verify_detects_a_modified_timestamp(good: Path) -> None:
    _sql(good, "UPDATE events SET ts_ms = ts_ms + 1 WHERE session_id = 't' AND seq = 2")
    message = (
        "session 't' seq 2: rule chain: hash does not match the row's content (the row was "
        "modified)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_a_deleted_row(good: Path) -> None:
    _sql(good, "DELETE FROM events WHERE session_id = 's' AND seq = 3")
    message = (
        "session 's' seq 4: rule chain: seq 4 follows seq 2: seq 3 is missing (a row was "
        "deleted, inserted or renumbered)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_reordered_rows(good: Path) -> None:
    _sql(
        good,
        "UPDATE events SET seq = -1 WHERE session_id = 's' AND seq = 2",
        "UPDATE events SET seq = 2 WHERE session_id = 's' AND seq = 3",
        "UPDATE events SET seq = 3 WHERE session_id = 's' AND seq = -1",
    )
    message = (
        "session 's' seq 2: rule chain: prev_hash does not match the hash of seq 1 (a row was "
        "modified, deleted, reordered or inserted)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_a_row_inserted_with_a_valid_looking_chain(good: Path) -> None:
    conn = sqlite3.connect(good)
    try:
        prev = conn.execute("SELECT hash FROM events WHERE session_id = 's' AND seq = 5").fetchone()
        line = encode_event(TurnStart(turn=2))
        digest = chain_hash("s", 6, 0, line, prev[0])
        conn.execute(
            "INSERT INTO events (session_id, seq, ts_ms, line, prev_hash, hash) "
            "VALUES ('s', 6, 0, ?, ?, ?)",
            (line, prev[0], digest),
        )
        conn.commit()
    finally:
        conn.close()
    message = (
        "session 's' seq 6: rule chain: the log ends at seq 6 but the session's recorded head "
        "is seq 5 with another hash (rows were appended or deleted behind the store's back)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_a_truncated_tail(good: Path) -> None:
    _sql(good, "DELETE FROM events WHERE session_id = 't' AND seq = 5")
    message = (
        "session 't' seq 4: rule chain: the log ends at seq 4 but the session's recorded head "
        "is seq 5 with another hash (rows were appended or deleted behind the store's back)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_a_changed_link(good: Path) -> None:
    # Schema version 2 finds a session's rows by walking its links (the writer's reads): a link
    # pointed elsewhere hides rows from it though every row is intact, so verify checks them.
    _sql(
        good,
        "UPDATE events SET prev_row = (SELECT id FROM events WHERE session_id = 's' AND seq = 2) "
        "WHERE session_id = 's' AND seq = 4",
    )
    message = (
        "session 's' seq 4: rule chain: the row links to seq 2 of 's', not to seq 3 (a link "
        "was changed behind the store's back)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_a_changed_head_link(good: Path) -> None:
    _sql(
        good,
        "UPDATE sessions SET head_row = (SELECT id FROM events WHERE session_id = 't' AND "
        "seq = 4) WHERE id = 't'",
    )
    message = (
        "session 't' seq 5: rule chain: the session's head row is not its seq 5 (a link was "
        "changed behind the store's back)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


def test_verify_detects_orphan_rows(good: Path) -> None:
    _sql(good, "DELETE FROM sessions WHERE id = 't'")
    message = (
        "session 't' seq 0: rule chain: events exist for a session missing from the sessions "
        "table (a session row was deleted)"
    )
    with pytest.raises(VerifyError, match=_violation(good, message)):
        verify_store(good)


async def test_verify_checks_checkpoints_against_a_re_fold(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        await _store(path, {"s": GOOD}, checkpoint_every=2)
    assert verify_store(path).checkpoints == 1
    _sql(path, """UPDATE checkpoints SET state = '{"grants":["sudo"],"events":5}'""")
    message = (
        """session 's' seq 5: rule checkpoint: checkpoint {"grants":["sudo"],"events":5} does """
        """not match a re-fold of seq 1..5 ({"turn":1,"grants":["bash"],"events":5})"""
    )
    with pytest.raises(VerifyError, match=_violation(path, message)):
        verify_store(path)
    _sql(path, "UPDATE checkpoints SET seq = 9")
    message = (
        "session 's' seq 9: rule checkpoint: checkpoint at seq 9 lies outside the log (seq 1..5)"
    )
    with pytest.raises(VerifyError, match=_violation(path, message)):
        verify_store(path)


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (
            [ApprovalAsked(id="q", tool_name="bash")],
            "session 's' seq 1: rule turn-enclosure: approval/asked id 'q' outside an open turn "
            "(every asked and decided must lie between turn/start and turn/end)",
        ),
        (
            [TurnStart(turn=1), ApprovalDecided(id="q", outcome=Outcome.REJECTED)],
            "session 's' seq 2: rule pairing: approval/decided id 'q' has no earlier "
            "approval/asked (a decided never comes before its asked)",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="q", tool_name="bash"),
                ApprovalDecided(id="q", outcome=Outcome.REJECTED),
                ApprovalDecided(id="q", outcome=Outcome.ALLOWED_ONCE),
            ],
            "session 's' seq 4: rule pairing: approval/decided id 'q' repeats the decision at "
            "seq 3 (every asked has exactly one decided)",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="q", tool_name="bash"),
                ApprovalAsked(id="q", tool_name="bash"),
            ],
            "session 's' seq 3: rule pairing: approval/asked id 'q' repeats the ask at seq 2 "
            "(ask ids must be unique)",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="q", tool_name="bash"),
                TurnEnd(turn=1, reason=COMPLETED),
                ApprovalDecided(id="q", outcome=Outcome.REJECTED),
            ],
            "session 's' seq 4: rule turn-enclosure: approval/decided id 'q' outside an open "
            "turn (every asked and decided must lie between turn/start and turn/end)",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="q", tool_name="bash"),
                TurnEnd(turn=1, reason=COMPLETED),
                TurnStart(turn=2),
                ApprovalDecided(id="q", outcome=Outcome.ALLOWED_ONCE),
            ],
            "session 's' seq 5: rule turn-enclosure: approval/decided id 'q' outside the turn of "
            "its approval/asked (every asked and decided must lie between turn/start and "
            "turn/end)",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="q", tool_name="bash"),
                ApprovalDecided(id="q", outcome=Outcome.REJECTED),
                TurnEnd(turn=1, reason=COMPLETED),
                ApprovalDecided(id="q", outcome=Outcome.REJECTED),
            ],
            "session 's' seq 5: rule turn-enclosure: approval/decided id 'q' outside an open "
            "turn (every asked and decided must lie between turn/start and turn/end)",
        ),
        (
            [TurnStart(turn=1), TurnStart(turn=2)],
            "session 's' seq 2: rule turn-order: turn/start 2 while turn 1 is open (a turn must "
            "end before the next starts)",
        ),
        (
            [TurnStart(turn=2), TurnEnd(turn=2, reason=COMPLETED), TurnStart(turn=2)],
            "session 's' seq 3: rule turn-order: turn/start 2 after turn 2 (turn numbers must "
            "increase)",
        ),
        (
            [TurnEnd(turn=1, reason=COMPLETED)],
            "session 's' seq 1: rule turn-order: turn/end 1 while no turn is open",
        ),
        (
            [TurnStart(turn=1), TurnEnd(turn=3, reason=COMPLETED)],
            "session 's' seq 2: rule turn-order: turn/end 3 while turn 1 is open",
        ),
        (
            [
                TurnStart(turn=1),
                ApprovalAsked(id="a", tool_name="bash"),
                ApprovalAsked(id="b", tool_name="bash"),
                ApprovalDecided(id="a", outcome=Outcome.REJECTED),
            ],
            "session 's' seq 3: rule pairing: approval/asked id 'b' has no approval/decided (a "
            "crash tail: open the store for writing to recover it, or allow pending asks for a "
            "live store)",
        ),
    ],
)
async def test_verify_names_the_first_broken_invariant(
    tmp_path: Path, events: list[Event], message: str
) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        await _store(path, {"ok": GOOD, "s": events, "later": [TurnEnd(turn=5, reason=COMPLETED)]})
    with pytest.raises(VerifyError, match=_violation(path, message)):
        verify_store(path)


async def test_verify_can_allow_pending_asks_of_a_live_store(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        async with open_sqlite_store(path) as store:
            await store.append("s", [TurnStart(turn=1), ApprovalAsked(id="q", tool_name="x")])
            summary = verify_store(path, allow_pending=True)
            assert summary.pending == 1
            assert summary.summary().endswith("; 1 asks still pending")
            with pytest.raises(VerifyError, match=r"rule pairing: approval/asked id 'q'"):
                verify_store(path)


# ----------------------------------------------------------------------- show


async def test_show_pairs_asked_and_decided_with_durations(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    events: list[Event] = [
        TurnStart(turn=1),
        ApprovalAsked(id="q1", tool_name="bash"),
        ApprovalAsked(id="q2", tool_name="edit"),
        ApprovalDecided(id="q2", outcome=Outcome.REJECTED),
        ApprovalDecided(id="q1", outcome=Outcome.ALLOWED_ONCE),
        ApprovalAsked(id="q3", tool_name="web"),
    ]
    ticks = (1_000, 1_000, 1_010, 1_100, 2_250, 2_300, 2_400)
    with trio.fail_after(10):
        async with open_sqlite_store(path, clock_ms=_clock(*ticks)) as store:  # type: ignore[arg-type]
            await store.create_session("s", "parent")
            for event in events:
                await store.append("s", [event])
    timeline = show_session(path, "s")
    assert timeline.session.session_id == "s"
    assert timeline.session.parent_id == "parent"
    assert timeline.session.events == 6
    assert timeline.entries == (
        TimelineEntry(seq=1, ts_ms=1_000, event=events[0]),
        TimelineEntry(seq=2, ts_ms=1_010, event=events[1], pair_seq=5, duration_ms=1_290),
        TimelineEntry(seq=3, ts_ms=1_100, event=events[2], pair_seq=4, duration_ms=1_150),
        TimelineEntry(seq=4, ts_ms=2_250, event=events[3], pair_seq=3, duration_ms=1_150),
        TimelineEntry(seq=5, ts_ms=2_300, event=events[4], pair_seq=2, duration_ms=1_290),
        TimelineEntry(seq=6, ts_ms=2_400, event=events[5]),
    )


def test_show_and_list_sessions(good: Path) -> None:
    sessions = list_sessions(good)
    assert [(s.session_id, s.events) for s in sessions] == [("s", 5), ("t", 5)]
    assert all(len(s.head_hash) == 64 for s in sessions)
    message = re.escape(
        f"session 'nope' is not in store file '{good}': run 'broker log show {good}' to list "
        "its sessions"
    )
    with pytest.raises(LogToolError, match=rf"^{message}$"):
        show_session(good, "nope")


def test_read_only_tools_leave_the_store_file_unchanged(good: Path, tmp_path: Path) -> None:
    before = good.read_bytes()
    list_sessions(good)
    show_session(good, "s")
    verify_store(good)
    session_lines(good, "s")
    export_all(good, tmp_path / "out")
    assert good.read_bytes() == before
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreOpenError, match=r"^store file '.*' does not exist: check the path$"):
        verify_store(missing)
    assert not missing.exists()


# ----------------------------------------------------------------------- export / import


def test_export_lines_are_exactly_encode_event_output(good: Path) -> None:
    assert session_lines(good, "s") == [encode_event(event) for event in GOOD]


async def test_export_all_writes_one_file_per_session_and_an_index(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        async with open_sqlite_store(path) as store:
            await store.create_session("root", None)
            await store.create_session("team/child 1", "root")
            await store.append("team/child 1", GOOD)
    out = tmp_path / "export"
    summary = export_all(path, out)
    assert summary.files == (("root", "root.jsonl"), ("team/child 1", "team%2Fchild%201.jsonl"))
    assert summary.events == 5
    assert (out / "root.jsonl").read_text() == ""
    text = (out / "team%2Fchild%201.jsonl").read_text(encoding="utf-8")
    assert text == "".join(encode_event(event) + "\n" for event in GOOD)
    index = json.loads((out / "index.json").read_text())
    assert [(s["id"], s["parent"], s["file"], s["events"]) for s in index["sessions"]] == [
        ("root", None, "root.jsonl", 0),
        ("team/child 1", "root", "team%2Fchild%201.jsonl", 5),
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "index.json",
        "root.jsonl",
        "team%2Fchild%201.jsonl",
    ]


def test_export_all_refuses_a_file_as_directory(good: Path, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    message = re.escape(
        f"export directory '{target}' is a file: pass a directory (it is created if missing)"
    )
    with pytest.raises(LogToolError, match=rf"^{message}$"):
        export_all(good, target)


def test_session_file_names_round_trip() -> None:
    for session_id in ("plain", "a/b", "sp ace", "ü", "..", "100%"):
        name = session_file_name(session_id)
        assert "/" not in name
        assert session_id_from_file_name(Path("/some/dir") / name) == session_id
    assert session_id_from_file_name("seed.txt") == "seed"


async def test_import_round_trips_an_export_byte_for_byte(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    export_all(good, out)
    target = tmp_path / "copy.db"
    with trio.fail_after(10):
        await import_file(target, out / "s.jsonl", session_id="p")
        summary = await import_file(target, out / "s.jsonl", parent_id="p")
    assert (summary.session_id, summary.parent_id, summary.events) == ("s", "p", 5)
    assert summary.recovery.clean
    assert session_lines(target, "s") == session_lines(good, "s")
    assert {s.session_id: s.parent_id for s in list_sessions(target)} == {"p": None, "s": "p"}
    verify_store(target)


async def test_import_stores_canonical_lines_and_accepts_a_pending_tail(tmp_path: Path) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"type": "turn/start", "data": {"turn": 1}}\r\n'
        '{"data":{"toolName":"bash","id":"q"},"type":"approval/asked"}\n'
    )
    store = tmp_path / "store.db"
    with trio.fail_after(10):
        summary = await import_file(store, source, session_id="x")
    assert summary.session_id == "x"
    assert session_lines(store, "x") == [
        encode_event(TurnStart(turn=1)),
        encode_event(ApprovalAsked(id="q", tool_name="bash")),
    ]


@pytest.mark.parametrize(
    ("lines", "number", "reason"),
    [
        (
            ["{not json"],
            3,
            "not valid JSON: Expecting property name enclosed in double quotes at column 2",
        ),
        (
            ['{"type":"turn/begin","data":{"turn":1}}'],
            3,
            _codec_reason('{"type":"turn/begin","data":{"turn":1}}'),
        ),
        (
            ['{"type":"approval/grant","data":{"toolName":"x","extra":1}}'],
            3,
            "malformed 'approval/grant' event: unexpected keys (extra): expected only toolName, "
            "id, command, by, atMs, expiresAtMs, ruleFile @ $",
        ),
        ([""], 3, "empty line (expected one JSON event per line)"),
        (
            ['{"type":"approval/decided","data":{"id":"zz","outcome":"rejected"}}'],
            3,
            "rule pairing: approval/decided id 'zz' has no earlier approval/asked (a decided "
            "never comes before its asked)",
        ),
    ],
)
async def test_a_malformed_line_names_its_number_and_imports_nothing(
    tmp_path: Path, lines: list[str], number: int, reason: str
) -> None:
    source = tmp_path / "bad.jsonl"
    good_lines = [encode_event(TurnStart(turn=1)), encode_event(ApprovalGrant(tool_name="x"))]
    source.write_text(
        "\n".join([*good_lines, *lines, encode_event(ApprovalGrant(tool_name="y"))]) + "\n"
    )
    store = tmp_path / "store.db"
    message = re.escape(
        f"import file '{source}' line {number}: {reason}; fix the line and import again "
        "(nothing was imported)"
    )
    with trio.fail_after(10), pytest.raises(ImportLineError, match=rf"^{message}$") as caught:
        await import_file(store, source)
    assert (caught.value.line_number, caught.value.reason) == (number, reason)
    assert not store.exists()
    # Into an existing store: nothing half-imported either.
    with trio.fail_after(10):
        await _store(store, {"other": GOOD})
        before = session_lines(store, "other")
        with pytest.raises(ImportLineError):
            await import_file(store, source)
    assert [s.session_id for s in list_sessions(store)] == ["other"]
    assert session_lines(store, "other") == before


async def test_import_into_an_existing_session_is_refused(good: Path, tmp_path: Path) -> None:
    source = tmp_path / "s.jsonl"
    source.write_text(encode_event(ApprovalPolicy(policy=Policy.NEVER)) + "\n")
    with trio.fail_after(10), pytest.raises(SessionExistsError, match=r"^session 's' already"):
        await import_file(good, source)
    assert session_lines(good, "s") == [encode_event(event) for event in GOOD]


async def test_import_of_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    message = re.escape(
        f"cannot read import file '{missing}': No such file or directory; check the path"
    )
    with trio.fail_after(10), pytest.raises(LogToolError, match=rf"^{message}$"):
        await import_file(tmp_path / "store.db", missing)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b"\xff\xfe")
    message = re.escape(
        f"import file '{latin}' is not UTF-8 text (invalid start byte at byte 0): "
        "convert it to UTF-8"
    )
    with trio.fail_after(10), pytest.raises(LogToolError, match=rf"^{message}$"):
        await import_file(tmp_path / "store.db", latin)
    assert not (tmp_path / "store.db").exists()


def test_parse_jsonl_accepts_a_missing_final_newline() -> None:
    text = encode_event(TurnStart(turn=1)) + "\n" + encode_event(ApprovalGrant(tool_name="x"))
    assert parse_jsonl(text, source="f") == [TurnStart(turn=1), ApprovalGrant(tool_name="x")]
    assert parse_jsonl("", source="f") == []


async def test_import_refuses_an_empty_file_and_an_unknown_parent(
    good: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    target = tmp_path / "target.db"
    with trio.fail_after(10):
        with pytest.raises(
            LogToolError,
            match=rf"^import file '{re.escape(str(empty))}' has no events: pass a file written "
            r"by `broker log export` \(one JSON event per line\)$",
        ):
            await import_file(target, empty)
        assert not target.exists()
        out = tmp_path / "export"
        export_all(good, out)
        with pytest.raises(
            LogToolError,
            match=r"^parent session 'nope' is not in store file '.*target\.db' \(the file does "
            r"not exist yet\): import the parent session first, or leave out --parent$",
        ):
            await import_file(target, out / "s.jsonl", parent_id="nope")
        await import_file(target, out / "s.jsonl", session_id="other")
        with pytest.raises(
            LogToolError,
            match=r"^parent session 'nope' is not in store file '.*target\.db': import the "
            r"parent session first, or leave out --parent$",
        ):
            await import_file(target, out / "s.jsonl", parent_id="nope")
    assert [s.session_id for s in list_sessions(target)] == ["other"]


async def test_an_older_log_whose_turn_ended_before_recovery_closed_its_ask_verifies(
    tmp_path: Path,
) -> None:
    # Brokers before the before-commit rules could end a turn while another task's question
    # was pending; a crash, then recovery, left this shape. It stays verifiable.
    path = tmp_path / "store.db"
    with trio.fail_after(10):
        await _store(
            path,
            {
                "s": [
                    TurnStart(turn=1),
                    ApprovalAsked(id="q", tool_name="bash"),
                    TurnEnd(turn=1, reason=COMPLETED),
                    ApprovalDecided(id="q", outcome=Outcome.CANCELLED, recovered=True),
                ]
            },
        )
    verify_store(path)


def _index_built(path: Path, read: str) -> tuple[list[tuple[int, str]], bool]:
    """*read* (``rows`` or ``linked_rows``) of session 's' through one reader, and whether the
    reader indexed the whole snapshot to do it (its TEMP table)."""
    from broker.store.sqlite import open_sqlite_reader

    with open_sqlite_reader(path) as reader:
        got = [(row.seq, row.line) for row in getattr(reader, read)("s")]
        temp = reader._conn.execute("SELECT name FROM sqlite_temp_master WHERE type = 'table'")
        return got, bool(temp.fetchall())


def test_one_session_is_read_by_walking_its_chain_not_by_indexing_the_file(good: Path) -> None:
    # `broker log show` of one session of a version-2 file walks the session's links, O(its
    # rows); rows(), which verify reads, indexes every row of the snapshot first (~0.4 s a
    # million rows). Both read the same rows from a healthy file.
    linked, indexed = _index_built(good, "linked_rows")
    every, indexed_every = _index_built(good, "rows")
    assert (indexed, indexed_every) == (False, True)
    assert linked == every == [(seq, encode_event(e)) for seq, e in enumerate(GOOD, start=1)]
    assert [entry.seq for entry in show_session(good, "s").entries] == [1, 2, 3, 4, 5]
    assert session_lines(good, "s") == [line for _, line in every]


@pytest.mark.parametrize(
    ("damage", "seqs"),
    [
        # A link pointed back two rows: the walk skips seq 3.
        (
            "UPDATE events SET prev_row = (SELECT id FROM events WHERE session_id = 's' AND "
            "seq = 2) WHERE session_id = 's' AND seq = 4",
            [1, 2, 3, 4, 5],
        ),
        # The head moved back: the walk misses seq 5.
        (
            "UPDATE sessions SET head_row = (SELECT id FROM events WHERE session_id = 's' AND "
            "seq = 4) WHERE id = 's'",
            [1, 2, 3, 4, 5],
        ),
        # A row renumbered: the walk is whole in length but not in seqs.
        ("UPDATE events SET seq = 7 WHERE session_id = 's' AND seq = 3", [1, 2, 4, 5, 7]),
    ],
)
def test_a_chain_that_is_not_whole_is_read_row_by_row_instead(
    good: Path, damage: str, seqs: list[int]
) -> None:
    # What the walk cannot vouch for is read as every row the file holds for the session, so
    # show reports the damage as it did before (a gap, a row out of place) instead of hiding it.
    _sql(good, damage)
    linked, indexed = _index_built(good, "linked_rows")
    assert indexed
    assert [seq for seq, _ in linked] == seqs
