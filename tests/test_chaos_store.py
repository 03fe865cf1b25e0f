"""``broker chaos --store``: the chaos run against a durable store, on the real clock (issue 22
step 5): SQLite and PostgreSQL keep every invariant, the stored log verifies, runs sharing a
database never meet, and a store that cannot be used is one line and exit status 2."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import trio

from broker import AbortSignal, AnswerNext, ApprovalRequest, Outcome, open_broker

pytestmark = pytest.mark.slow

# Every run here takes a few seconds; a hang must fail, not block the suite (the whole test is
# also bounded by pytest-timeout).
TIMEOUT = 60
SMALL = ("--asks", "300", "--sessions", "6", "--fault-rate", "0.2")


def broker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def chaos_json(store: str, *argv: str) -> list[dict[str, Any]]:
    """Run ``broker chaos --store STORE --json`` and return its reports, checking that it
    exited 0 (no violation) with nothing on stderr."""
    done = broker("chaos", "--store", store, "--json", *argv)
    assert done.stderr == ""
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, [r["violations"] for r in reports]
    return reports


def assert_kept(report: dict[str, Any], *, sessions: int) -> None:
    """Every invariant held, the run really put faults on the store, and its rows verify."""
    assert report["violations"] == []
    assert report["faults"]["injected-store-failure"] > 0
    assert report["faults"]["answerer-hang"] > 0
    assert report["asked"] > 0
    assert report["recovered"] == report["faults"]["injected-store-decided-alone"]
    assert report["verified"].startswith(f"{sessions} sessions, ")
    assert "hash chains, turn order, turn enclosure, pairing, checkpoints" in report["verified"]


def test_chaos_on_a_sqlite_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "chaos.sqlite"
    [report] = chaos_json(f"sqlite://{path}", *SMALL)
    assert report["store"] == str(path)
    assert_kept(report, sessions=6)
    verified = broker("log", "verify", str(path), "--allow-pending")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("ok: 6 sessions, ")


def test_the_text_report_names_the_store_and_what_was_verified(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "chaos.sqlite"
    done = broker("chaos", "--store", str(path), "--asks", "50", "--sessions", "2")
    assert done.stderr == ""
    assert done.returncode == 0, done.stdout
    assert "violations: 0" in done.stdout
    lines = done.stdout.splitlines()
    assert f"store: {path} (real clock, delays x0.1)" in lines
    assert any(line.startswith("stored log: 2 sessions, ") for line in lines), lines


def test_the_default_run_stays_in_memory_and_its_json_is_unchanged() -> None:
    done = broker("chaos", "--asks", "50", "--sessions", "2", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {
        "config",
        "asked",
        "outcomes",
        "raised",
        "faults",
        "recovered",
        "abort_lags",
        "settled_by_teardown",
        "violations",
        "elapsed_s",
    }
    text = broker("chaos", "--asks", "50", "--sessions", "2")
    assert not any(line.startswith(("store:", "stored log:")) for line in text.stdout.splitlines())
    assert "(bound 1;" in text.stdout or "no question was withdrawn" in text.stdout


def test_chaos_on_postgres(postgres_dsn: str) -> None:
    [first, second] = chaos_json(postgres_dsn, *SMALL, "--seed", "5", "--seeds", "2")
    for report in (first, second):
        assert report["store"] == postgres_dsn
        assert_kept(report, sessions=6)  # each run verifies its own sessions only
    verified = broker("log", "verify", postgres_dsn, "--allow-pending")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("ok: 12 sessions, ")


def test_two_runs_at_once_on_one_postgres_database_never_meet(postgres_dsn: str) -> None:
    """The same seed twice, at the same time: the same plan, the same call ids, new sessions."""
    argv = [sys.executable, "-W", "error", "-m", "broker.cli", "chaos", "--store", postgres_dsn]
    argv += ["--json", *SMALL, "--seed", "7"]
    runs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        outputs = [run.communicate(timeout=TIMEOUT) for run in runs]
    finally:
        for run in runs:  # a hang fails the test and leaves nothing running
            run.kill()
            run.communicate()
    assert [run.returncode for run in runs] == [0, 0], outputs
    for out, err in outputs:
        assert err == ""
        [report] = [json.loads(line) for line in out.splitlines()]
        assert_kept(report, sessions=6)
    verified = broker("log", "verify", postgres_dsn, "--allow-pending")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("ok: 12 sessions, ")


@pytest.mark.parametrize(
    ("store", "line"),
    [
        (
            "postgresql://user:secret@127.0.0.1:1/db",
            "broker chaos: cannot connect to postgresql store "
            "'postgresql://user:***@127.0.0.1:1/db': connection failed: ",
        ),
        (
            "mysql://user:secret@db/x",
            "broker chaos: argument --store: must be a file path, sqlite:///PATH or "
            "postgresql://… (or postgres://…), got a mysql:// URL: pass a SQLite file path or a "
            "PostgreSQL URL (see broker chaos --help)",
        ),
        (
            "sqlite://relative.sqlite",
            "broker chaos: argument --store: 'sqlite://relative.sqlite' is not a sqlite URL of a "
            "file: write sqlite:///PATH with an absolute path (three slashes), or pass the file "
            "path itself (see broker chaos --help)",
        ),
        (
            "/nonexistent-dir/chaos.sqlite",
            "broker chaos: cannot open store file '/nonexistent-dir/chaos.sqlite': directory "
            "'/nonexistent-dir' does not exist; create it first",
        ),
    ],
)
def test_a_store_that_cannot_be_used_is_one_line_and_status_2(store: str, line: str) -> None:
    done = broker("chaos", "--store", store, "--asks", "5")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "secret" not in done.stderr
    assert done.stderr.startswith(line)


def test_an_abort_while_the_asked_is_being_committed_is_seen(tmp_path: pathlib.Path) -> None:
    """What ``broker chaos --store`` found: on a durable store the asker waits for its asked's
    commit before it listens to the signal; an abort in that window must still withdraw it."""

    async def main() -> Outcome | None:
        async with open_broker(store=tmp_path / "s.sqlite") as b, b.open_session() as session:

            async def hang(req: ApprovalRequest, next_: AnswerNext) -> Outcome:
                await trio.sleep_forever()
                raise AssertionError("unreachable")

            signal = AbortSignal()
            request = ApprovalRequest(
                agent=session.agent, tool_name="bash", call_id="c", signal=signal
            )
            outcome = None
            async with b.answerer(hang), session.turn(), trio.open_nursery() as nursery:

                async def abort_during_the_commit() -> None:
                    await trio.lowlevel.checkpoint()  # the asker now waits for the commit
                    signal.abort("gone")

                nursery.start_soon(abort_during_the_commit)
                with trio.move_on_after(5):
                    outcome = await b.request(request)
            return outcome

    assert trio.run(main) is Outcome.CANCELLED
