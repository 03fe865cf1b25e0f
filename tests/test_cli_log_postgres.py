"""``broker log show|verify|export|import`` on a PostgreSQL store (issue 22 step 5)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import trio

from broker import ApprovalRequest, open_broker

pytestmark = pytest.mark.slow


def broker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def one_question(dsn: str) -> str:
    async with open_broker(store=dsn, policy="never") as b, b.open_session() as session:
        async with session.turn():
            await b.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
        return session.id


def test_show_verify_export_and_import_take_a_dsn(
    postgres_dsn: str, tmp_path: pathlib.Path
) -> None:
    session = trio.run(one_question, postgres_dsn)
    listed = broker("log", "show", postgres_dsn)
    assert listed.returncode == 0, listed.stderr
    assert session in listed.stdout
    timeline = broker("log", "show", postgres_dsn, session)
    assert timeline.returncode == 0, timeline.stderr
    assert "rejected" in timeline.stdout
    verified = broker("log", "verify", postgres_dsn)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    out = tmp_path / "s.jsonl"
    exported = broker("log", "export", postgres_dsn, "--session", session, "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = out.read_text().splitlines()
    assert [json.loads(line)["type"] for line in lines] == [
        "turn/start",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ]
    imported = broker("log", "import", postgres_dsn, str(out), "--session", "copy")
    assert imported.returncode == 0, imported.stderr
    again = tmp_path / "copy.jsonl"
    assert (
        broker("log", "export", postgres_dsn, "--session", "copy", "--out", str(again)).returncode
        == 0
    )
    assert again.read_text() == out.read_text()
    unknown = broker("log", "show", postgres_dsn, "nope")
    assert unknown.returncode == 2
    assert "session 'nope' is not in postgresql store '" in unknown.stderr


def test_a_server_that_does_not_answer_is_one_line_and_hides_the_password() -> None:
    done = broker("log", "verify", "postgresql://user:secret@127.0.0.1:1/db")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "secret" not in done.stderr
    assert done.stderr.startswith(
        "broker log verify: cannot connect to postgresql store 'postgresql://user:***@127.0.0.1:1/db'"
    )
