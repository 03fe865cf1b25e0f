"""Answers from another process (issue 23), on SQLite and on PostgreSQL: a question asked in
process A (``tests/remote_asker.py``) is listed and answered from process B — the ``broker
pending`` and ``broker answer`` commands, or the ``answer_board`` API in another interpreter."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytestmark = pytest.mark.slow

TIMEOUT = 30


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """The store both processes use: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("postgres_dsn")
        return dsn
    return str(tmp_path / "log.sqlite")


def board_rows(store: str) -> int:
    """How many questions the store's answer board still holds."""
    if store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store) as conn:
            row = conn.execute("SELECT count(*) FROM broker.board_questions").fetchone()
    else:
        import sqlite3

        db = sqlite3.connect(store)
        try:
            row = db.execute("SELECT count(*) FROM board_questions").fetchone()
        finally:
            db.close()
    assert row is not None
    return int(row[0])


def broker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@contextmanager
def asker(store: str | pathlib.Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-m", "tests.remote_asker", str(store), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:  # closes the pipes and waits on the way out
        try:
            assert process.stdout is not None
            assert "session" in json.loads(process.stdout.readline())
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def decision_of(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 0, err
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def wait_pending(store: str | pathlib.Path) -> list[dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        listed = broker("pending", str(store), "--json")
        if listed.returncode != 0 and (
            "does not exist" in listed.stderr or "the file is empty" in listed.stderr
        ):
            time.sleep(0.05)  # the asker has not created its store yet, or not its schema
            continue
        assert listed.returncode == 0, listed.stderr
        rows: list[dict[str, Any]] = json.loads(listed.stdout)
        if rows:
            return rows
        time.sleep(0.05)
    pytest.fail("no question appeared in broker pending")


def test_a_question_asked_in_a_is_listed_and_answered_by_the_cli_in_b(store: str) -> None:
    with asker(store) as a:
        (row,) = wait_pending(store)
        assert row["tool"] == "bash"
        assert row["callId"] == "call_1"
        assert row["reason"] == "rm -rf build"
        assert row["displayReason"] == "delete the build directory"
        assert row["owner"] == f"{a.pid}@{__import__('socket').gethostname()}"
        answered = broker("answer", str(store), row["id"], "allow", "--by", "alice")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == f"question {row['id']}: allowed-once by alice\n"
        decision = decision_of(a)
    assert decision == {
        "id": row["id"],
        "outcome": "allowed-once",
        "answeredBy": "alice",
        "answers": "allowed-once by alice (typed)",  # a typed name: recorded as typed
    }
    verified = broker("log", "verify", str(store))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # Settled: the list is empty, the board forgot it (the log keeps it), and another answer is
    # refused naming the outcome.
    assert broker("pending", str(store), "--json").stdout == "[]\n"
    assert board_rows(store) == 0
    again = broker("answer", str(store), row["id"], "reject")
    assert again.returncode == 1
    assert again.stderr == (
        f"broker answer: question {row['id']!r} is no longer pending: it was settled as "
        "allowed-once\n"
    )


def test_the_api_answers_from_another_interpreter(store: str) -> None:
    with asker(store) as a:
        (row,) = wait_pending(store)
        code = (
            "import sys, trio\n"
            "from broker import answer_board\n"
            "async def main():\n"
            "    board = answer_board(sys.argv[1])\n"
            "    try:\n"
            "        return await board.answer(sys.argv[2], 'rejected', 'bob')\n"
            "    finally:\n"
            "        await board.aclose()\n"
            "print(trio.run(main).outcome)\n"
        )
        b = subprocess.run(
            [sys.executable, "-W", "error", "-c", code, str(store), row["id"]],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert b.returncode == 0, b.stderr
        assert b.stdout == "rejected\n"
        assert decision_of(a) == {"id": row["id"], "outcome": "rejected", "answeredBy": "bob"}


def test_two_answers_racing_one_wins_the_other_is_told(store: str) -> None:
    with asker(store) as a:
        (row,) = wait_pending(store)
        argv = [sys.executable, "-m", "broker.cli", "answer", str(store), row["id"]]
        racers = [
            subprocess.Popen([*argv, verb, "--by", who], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for verb, who in (("allow", "alice"), ("reject", "bob"))
        ]  # fmt: skip
        results = []
        for racer in racers:
            with racer:
                out, err = racer.communicate(timeout=TIMEOUT)
                results.append((racer.returncode, out, err))
        decision = decision_of(a)
    codes = sorted(code for code, _out, _err in results)
    assert codes == [0, 1]
    winner = "alice" if results[0][0] == 0 else "bob"
    assert decision["answeredBy"] == winner
    (loser_err,) = [err for code, _out, err in results if code == 1]
    assert loser_err.startswith(f"broker answer: question {row['id']!r} ")
    assert decision["outcome"] in loser_err


def test_an_aborted_question_refuses_the_answer_naming_cancelled(store: str) -> None:
    with asker(store, "--abort-on-stdin") as a:
        (row,) = wait_pending(store)
        assert a.stdin is not None
        a.stdin.write("abort\n")
        a.stdin.flush()
        assert decision_of(a)["outcome"] == "cancelled"
    answered = broker("answer", str(store), row["id"], "allow")
    assert answered.returncode == 1
    assert answered.stderr == (
        f"broker answer: question {row['id']!r} is no longer pending: it was settled as cancelled\n"
    )


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["answer", "STORE", "nope", "allow"], 1, "broker answer: unknown question id 'nope': "),
        (["answer", "STORE", "x", "maybe"], 2, "broker answer: argument verb: invalid choice"),
        (["answer", "STORE", "x", "allow", "--by", "y" * 201], 2, "broker answer: by must be"),
        (["pending", "mysql://x"], 2, "broker pending: store must be a file path, sqlite:///"),
        (["pending", "MISSING"], 2, "broker pending: store file '"),
    ],
)
def test_bad_input_is_one_line(
    tmp_path: pathlib.Path, argv: list[str], status: int, message: str
) -> None:
    store = tmp_path / "log.sqlite"
    with asker(store):
        wait_pending(store)
        done = broker(
            *[
                str(store)
                if a == "STORE"
                else str(tmp_path / "missing.sqlite")
                if a == "MISSING"
                else a
                for a in argv
            ]
        )
    assert done.returncode == status
    assert done.stderr.startswith(message), done.stderr
    assert done.stderr.count("\n") == 1


def test_the_demo_takes_an_answer_from_another_terminal(tmp_path: pathlib.Path) -> None:
    store = tmp_path / "demo.sqlite"
    argv = [sys.executable, "-m", "broker.cli", "demo", "--remote-answers", "--store", str(store)]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as demo:
        try:
            (row,) = wait_pending(store)
            answered = broker("answer", str(store), row["id"], "reject", "--by", "bob")
            assert answered.returncode == 0, answered.stderr
            out, err = demo.communicate(timeout=TIMEOUT)
        finally:
            if demo.poll() is None:
                demo.kill()
    if demo.returncode == 2 and "bubblewrap" in err:
        pytest.skip(f"the demo needs bubblewrap: {err.strip()}")
    assert demo.returncode == 0, err
    assert f"or from another terminal: broker answer {store} {row['id']} allow|reject" in out
    assert '"outcome":"rejected","answeredBy":"bob"' in out
    assert "file on disk: escalated.txt does not exist" in out


def test_a_lost_listener_connection_still_gets_the_answer(postgres_dsn: str) -> None:
    """PostgreSQL: the asker's LISTEN connection is killed mid-wait; it reconnects and polls,
    so the answer given meanwhile still reaches it (never a wrong outcome, never lost)."""
    psycopg = pytest.importorskip("psycopg")
    listener = (
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'broker-board-listener' "
        "AND datname = current_database()"
    )
    with asker(postgres_dsn) as a:
        (row,) = wait_pending(postgres_dsn)
        with psycopg.connect(postgres_dsn, autocommit=True) as admin:
            deadline = time.monotonic() + TIMEOUT
            while not (pids := admin.execute(listener).fetchall()):
                assert time.monotonic() < deadline, "the asker never listened"
                time.sleep(0.02)
            for (pid,) in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        answered = broker("answer", postgres_dsn, row["id"], "allow", "--by", "carol")
        assert answered.returncode == 0, answered.stderr
        assert decision_of(a) == {
            "id": row["id"],
            "outcome": "allowed-once",
            "answeredBy": "carol",
            "answers": "allowed-once by carol (typed)",
        }


def test_control_characters_and_markup_are_stored_as_given_and_shown_escaped(
    tmp_path: pathlib.Path,
) -> None:
    store = tmp_path / "log.sqlite"
    reason = "wipe \x1b[2J<script>alert(1)</script>\u202e"
    by = "eve\x1b[31m"
    with asker(store, "--reason", reason) as a:
        (row,) = wait_pending(store)
        assert row["reason"] == reason  # --json carries the text exactly (JSON-escaped)
        shown = broker("pending", str(store)).stdout
        assert "\x1b" not in shown
        assert "\u202e" not in shown
        assert "reason: wipe \\x1b[2J<script>alert(1)</script>\\u202e" in shown
        answered = broker("answer", str(store), row["id"], "reject", "--by", by)
        assert answered.returncode == 0, answered.stderr
        assert "\x1b" not in answered.stdout
        decision = decision_of(a)
    assert decision["answeredBy"] == by  # stored as given
    sessions = broker("log", "show", str(store)).stdout.splitlines()
    session = sessions[1].split()[0]  # under the header line
    timeline = broker("log", "show", str(store), session).stdout
    assert "\x1b" not in timeline
    assert "by eve\\x1b[31m" in timeline


def test_always_from_the_cli_remembers_the_tool_where_offered(store: str) -> None:
    with asker(store, "--allow-always") as a:
        (row,) = wait_pending(store)
        answered = broker("answer", store, row["id"], "always", "--by", "alice")
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == f"question {row['id']}: allowed-once by alice\n"
        assert decision_of(a)["outcome"] == "allowed-once"
    session = row["session"]
    timeline = broker("log", "show", store, session).stdout
    assert "grant   tool bash" in timeline
    with asker(store) as b:  # no always-allow offered here
        (row,) = wait_pending(store)
        refused = broker("answer", store, row["id"], "always")
        assert refused.returncode == 2
        assert "does not offer always-allow" in refused.stderr
        assert broker("answer", store, row["id"], "reject").returncode == 0
        assert decision_of(b)["outcome"] == "rejected"


def test_always_from_the_cli_for_a_while_or_for_the_project(
    store: str, tmp_path: pathlib.Path
) -> None:
    rules = tmp_path / "project" / "rules.toml"
    with asker(store, "--allow-always", "--command", "npm run build") as a:
        (row,) = wait_pending(store)
        misused = broker("answer", store, row["id"], "allow", "--for", "30m")
        assert misused.returncode == 2
        assert "--for and --project qualify an always answer" in misused.stderr
        answered = broker("answer", store, row["id"], "always", "--for", "30m", "--by", "al")
        assert answered.returncode == 0, answered.stderr
        assert decision_of(a)["outcome"] == "allowed-once"
    timeline = broker("log", "show", store, row["session"]).stdout
    assert "grant   tool bash command 'npm run'" in timeline
    assert " until 20" in timeline  # the grant ends: its expiry is in the log
    flags = ("--allow-always", "--command", "npm run build", "--project-rules", str(rules))
    with asker(store, *flags) as b:
        (row,) = wait_pending(store)
        listed = json.loads(broker("pending", store, "--json").stdout)
        assert (listed[0]["always"], listed[0]["projectRules"]) == ("bash: npm run", str(rules))
        both = broker("answer", store, row["id"], "always", "--for", "1h", "--project")
        assert both.returncode == 2  # one or the other
        answered = broker("answer", store, row["id"], "always", "--project", "--by", "al")
        assert answered.returncode == 0, answered.stderr
        assert decision_of(b)["outcome"] == "allowed-once"
    assert 'command = "npm run"' in rules.read_text()
    timeline = broker("log", "show", store, row["session"]).stdout
    assert f"remembered in {rules}" in timeline
    with asker(store, "--allow-always", "--command", "npm run x") as c:  # no project file
        (row,) = wait_pending(store)
        refused = broker("answer", store, row["id"], "always", "--project")
        assert refused.returncode == 2
        assert "does not offer always-allow for the project" in refused.stderr
        assert broker("answer", store, row["id"], "reject").returncode == 0
        assert decision_of(c)["outcome"] == "rejected"


def test_an_answer_after_a_takeover_is_refused_naming_what_recovery_recorded(
    postgres_dsn: str,
) -> None:
    """PostgreSQL: the asking process dies with its question on the board; another process
    takes the session over (the lease expired), which closes the crash tail; an answer then is
    refused naming `cancelled`, never stored for nobody."""
    psycopg = pytest.importorskip("psycopg")
    import signal as signals

    import trio

    from broker import open_broker

    with asker(postgres_dsn) as a:
        (row,) = wait_pending(postgres_dsn)
        a.send_signal(signals.SIGKILL)
        a.wait(TIMEOUT)
    # Its lease runs out (made so with SQL, as a paused owner's would).
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute(
            "UPDATE broker.sessions SET lease_expires_ms = 0 WHERE id = %s", (row["session"],)
        )
    # Still listed: its owner is gone, but nothing has recorded a decision yet.
    assert [q["id"] for q in json.loads(broker("pending", postgres_dsn, "--json").stdout)] == [
        row["id"]
    ]

    async def take_over() -> None:
        async with open_broker(store=postgres_dsn) as b, b.open_session(resume=row["session"]):
            pass

    trio.run(take_over)
    assert broker("pending", postgres_dsn, "--json").stdout == "[]\n"
    refused = broker("answer", postgres_dsn, row["id"], "allow")
    assert refused.returncode == 1
    assert refused.stderr == (
        f"broker answer: question {row['id']!r} is no longer pending: it was settled as cancelled\n"
    )
    verified = broker("log", "verify", postgres_dsn)
    assert verified.returncode == 0, verified.stdout + verified.stderr
