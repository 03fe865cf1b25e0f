"""``broker log`` through its own argparse registration (``broker.cli._log.register``)."""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
from pathlib import Path

import pytest
import trio

from broker._codec import encode_event
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    Event,
    TurnStart,
)
from broker._vocabulary import Outcome
from broker.cli import _log
from broker.store.sqlite import open_sqlite_store

EVENTS: list[Event] = [
    TurnStart(turn=1),
    ApprovalAsked(id="q1", tool_name="bash", reason="rm -rf build"),
    ApprovalDecided(id="q1", outcome=Outcome.ALLOWED_ONCE, remembered=True),
    ApprovalGrant(tool_name="bash"),
    ApprovalAsked(id="q2", tool_name="edit"),
    # A live log: turn 1 is still open, its question q2 pending (a turn cannot end before).
    ApprovalGrant(tool_name="edit"),
]
# 2026-01-02 03:04:05.000 UTC, then one tick per commit.
T0 = 1_767_323_045_000
TICKS = [T0, T0, T0 + 250, T0 + 1_500, T0 + 1_600, T0 + 2_000, T0 + 2_001]


def run(*argv: str) -> int:
    """Parse *argv* as ``broker <argv>`` with only the log command registered, and run it."""
    parser = argparse.ArgumentParser(prog="broker")
    sub = parser.add_subparsers(dest="command", required=True)
    _log.register(sub)
    args = parser.parse_args(argv)
    status: int = args.func(args)
    return status


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    ticks = iter(TICKS)

    async def write() -> None:
        with trio.fail_after(10):
            async with open_sqlite_store(path, clock_ms=lambda: next(ticks)) as store:
                await store.create_session("s", "root")
                for event in EVENTS:
                    await store.append("s", [event])

    trio.run(write)
    return path


def test_show_lists_sessions(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("log", "show", str(store)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "SESSION  PARENT  EVENTS  CREATED                   HEAD"
    assert re.fullmatch(r"s        root         6  2026-01-02 03:04:05\.000Z  [0-9a-f]{16}", out[1])


def test_show_prints_a_paired_timeline(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("log", "show", str(store), "s") == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"session 's' \(parent root\), 6 events, created 2026-01-02 03:04:05\.000Z, "
        r"head [0-9a-f]{16}",
        out[0],
    )
    assert out[1:] == [
        "   SEQ  TIME (UTC)      ELAPSED  EVENT",
        "     1  03:04:05.000    +0.000s  turn 1 started",
        "     2  03:04:05.250    +0.250s  asked   q1 tool bash (rm -rf build) -> decided at #3 "
        "after 1.250s",
        "     3  03:04:06.500    +1.500s  decided q1 allowed-once [remembered] (asked at #2, "
        "1.250s)",
        "     4  03:04:06.600    +1.600s  grant   tool bash",
        "     5  03:04:07.000    +2.000s  asked   q2 tool edit -> pending (no decision)",
        "     6  03:04:07.001    +2.001s  grant   tool edit",
    ]


def test_show_an_unknown_session_exits_2(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("log", "show", str(store), "nope") == 2
    assert capsys.readouterr().err == (
        f"broker log show: session 'nope' is not in store file '{store}': run 'broker log show "
        f"{store}' to list its sessions\n"
    )


def test_verify_exit_status_and_messages(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run("log", "verify", str(store), "--allow-pending") == 0
    assert capsys.readouterr().out == (
        "ok: 1 sessions, 6 events, 1 checkpoints verified (hash chains, turn order, turn "
        "enclosure, pairing, checkpoints); 1 asks still pending\n"
    )
    assert run("log", "verify", str(store)) == 1
    assert capsys.readouterr().err == (
        f"broker log verify: store file '{store}': session 's' seq 5: rule pairing: "
        "approval/asked id 'q2' has no approval/decided (a crash tail: open the store for "
        "writing to recover it, or allow pending asks for a live store)\n"
    )
    conn = sqlite3.connect(store)
    conn.execute("UPDATE events SET line = replace(line, 'bash', 'BASH') WHERE seq = 4")
    conn.commit()
    conn.close()
    assert run("log", "verify", str(store), "--allow-pending") == 1
    assert capsys.readouterr().err == (
        f"broker log verify: store file '{store}': session 's' seq 4: rule chain: hash does not "
        "match the row's content (the row was modified)\n"
    )


def test_verify_of_a_missing_store_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    assert run("log", "verify", str(missing)) == 2
    assert capsys.readouterr().err == (
        f"broker log verify: store file '{missing}' does not exist: check the path\n"
    )
    assert not missing.exists()


def test_export_one_session(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "".join(encode_event(event) + "\n" for event in EVENTS)
    assert run("log", "export", str(store), "--session", "s") == 0
    assert capsys.readouterr().out == expected
    out = tmp_path / "s.jsonl"
    assert run("log", "export", str(store), "--session", "s", "--out", str(out)) == 0
    assert out.read_text(encoding="utf-8") == expected


def test_export_with_time_keeps_the_timestamps(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("log", "export", str(store), "--session", "s", "--with-time") == 0
    lines = capsys.readouterr().out.splitlines()
    times = [json.loads(line)["time"] for line in lines]
    assert times[0] == "2026-01-02T03:04:05.000Z"
    assert times[-1] == "2026-01-02T03:04:07.001Z"
    assert times == sorted(times)
    # The rest of each line is the stored, seed-compatible line, byte for byte.
    assert [re.sub(r'^\{"time":"[^"]*",', "{", line) for line in lines] == [
        encode_event(event) for event in EVENTS
    ]
    out = tmp_path / "all"
    assert run("log", "export", str(store), "--out", str(out), "--with-time") == 0
    assert (out / "s.jsonl").read_text(encoding="utf-8").splitlines() == lines


def test_export_all_needs_a_directory(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("log", "export", str(store)) == 2
    assert capsys.readouterr().err == (
        "broker log export: exporting every session needs --out DIR (one <id>.jsonl per "
        "session): pass --out, or --session ID for one session\n"
    )
    out = tmp_path / "all"
    assert run("log", "export", str(store), "--out", str(out)) == 0
    assert capsys.readouterr().err == f"exported 1 sessions, 6 events to {out}\n"
    assert sorted(p.name for p in out.iterdir()) == ["index.json", "s.jsonl"]


def test_import_round_trip_and_errors(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exported = tmp_path / "s.jsonl"
    assert run("log", "export", str(store), "--session", "s", "--out", str(exported)) == 0
    copy = tmp_path / "copy.db"
    assert run("log", "import", str(copy), str(exported), "--session", "root") == 0
    capsys.readouterr()
    assert run("log", "import", str(copy), str(exported), "--parent", "root") == 0
    assert capsys.readouterr().out == "imported 6 events as session 's'\n"
    assert run("log", "import", str(copy), str(exported)) == 1
    assert capsys.readouterr().err == (
        f"broker log import: session 's' already exists in store file '{copy}': import into a "
        "new session id\n"
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text(encode_event(TurnStart(turn=1)) + "\n" + '{"type":"turn/start"}\n')
    assert run("log", "import", str(copy), str(bad), "--session", "new") == 1
    assert capsys.readouterr().err == (
        f"broker log import: import file '{bad}' line 2: event 'turn/start' has no data object; "
        "fix the line and import again (nothing was imported)\n"
    )
    assert run("log", "show", str(copy)) == 0
    assert "new" not in capsys.readouterr().out


def test_show_names_who_answered_with_control_characters_visible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # answeredBy comes from whoever answered (a web form, a CLI flag): a terminal escape or a
    # bidi override in it must reach the reader's terminal as visible text, never as control.
    path = tmp_path / "store.db"
    ticks = iter(TICKS)

    async def write() -> None:
        with trio.fail_after(10):
            async with open_sqlite_store(path, clock_ms=lambda: next(ticks)) as store:
                await store.create_session("s", None)
                await store.append("s", [TurnStart(turn=1)])
                await store.append("s", [ApprovalAsked(id="q1", tool_name="bash")])
                decided = ApprovalDecided(
                    id="q1", outcome=Outcome.REJECTED, answered_by="al\x1b[2Jice\u202e"
                )
                await store.append("s", [decided])

    trio.run(write)
    assert run("log", "show", str(path), "s") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[4] == (
        "     3  03:04:06.500    +1.500s  decided q1 rejected by al\\x1b[2Jice\\u202e "
        "(asked at #2, 1.250s)"
    )
