"""``broker inbox STORE`` as its own process beside an asking process (``tests/remote_asker.py``):
it lists and answers through the store's board — SQLite across processes, PostgreSQL across
hosts — and refuses to start, in one line, where it cannot."""

from __future__ import annotations

import json
import pathlib
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import pytest

from broker import ApprovalDecided, Outcome
from broker._codec import decode_event
from broker.inbox import InboxKeys
from broker.store import open_sqlite_reader

from .test_remote_processes import asker, decision_of, wait_pending

pytestmark = pytest.mark.slow

TIMEOUT = 30
TOKEN = "cli-test-token-0123456789abcdef"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """The store both processes use: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        dsn: str = request.getfixturevalue("postgres_dsn")
        return dsn
    return str(tmp_path / "log.sqlite")


@contextmanager
def inbox(store: str, *extra: str) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """``broker inbox STORE --port 0 ...`` running; yields it, its base URL and the token as
    printed."""
    with subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "inbox", store, "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first.startswith("broker inbox: http://127.0.0.1:"), first
            url, printed = first.removeprefix("broker inbox: ").strip().split("/?token=")
            yield process, url, printed
        finally:
            if process.poll() is None:
                process.kill()


def call(url: str, *, token: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers |= {"Content-Type": "application/json", "X-CSRF-Token": InboxKeys(token=token).csrf}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def test_a_question_asked_in_another_process_is_listed_and_answered(
    store: str, tmp_path: pathlib.Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)  # a secret: the inbox refuses one that others can read
    with (
        asker(store) as a,
        inbox(store, "--token-file", str(token_file)) as (
            process,
            url,
            printed,
        ),
    ):
        assert printed == "<the token in --token-file>"  # a token from a file is not shown
        (row,) = wait_pending(store)
        status, listed = call(f"{url}/api/pending", token=TOKEN)
        assert status == 200
        (shown,) = listed["questions"]
        assert (shown["id"], shown["reason"], shown["displayReason"]) == (
            row["id"],
            "rm -rf build",
            "delete the build directory",
        )
        assert call(f"{url}/api/pending", token="not-the-token-0123456789")[0] == 401
        answer = {"id": row["id"], "outcome": "allowed-once", "by": "alice"}
        assert call(f"{url}/api/answer", token=TOKEN, body=answer) == (
            200,
            {"id": row["id"], "outcome": "allowed-once", "by": "alice"},
        )
        assert decision_of(a) == {
            "id": row["id"],
            "outcome": "allowed-once",
            "answeredBy": "alice",
            "answers": "allowed-once by alice (shared-token)",
        }
        status, refused = call(f"{url}/api/answer", token=TOKEN, body=answer | {"by": "bob"})
        assert status == 409
        assert json.loads(refused)["recorded"] == "allowed-once"
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=TIMEOUT)
    assert process.returncode == 130
    assert err == "broker inbox: SIGINT received: stopped\n"


def test_a_new_token_is_printed_in_the_address_and_opens_the_inbox(
    tmp_path: pathlib.Path,
) -> None:
    store = str(tmp_path / "log.sqlite")
    with asker(store), inbox(store) as (process, url, printed):
        assert process.stdout is not None
        second = process.stdout.readline()
        assert second == f"broker inbox: answering questions on {store}; Ctrl-C stops\n"
        assert len(printed) >= 40
        wait_pending(store)
        status, listed = call(f"{url}/api/pending", token=printed)
        assert (status, listed["total"]) == (200, 1)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=TIMEOUT)
    assert process.returncode == 143


def test_the_inbox_refuses_in_one_line_what_it_cannot_do(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "missing.sqlite"
    weak = tmp_path / "weak"
    weak.write_text("short\n")
    weak.chmod(0o600)
    nowhere = tmp_path / "no-such-folder" / "token"
    taken = socket.socket()
    with taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        store = str(tmp_path / "log.sqlite")
        with asker(store):
            cases = [
                (["inbox", str(missing)], f"broker inbox: store file '{missing}' does not exist"),
                (
                    ["inbox", store, "--port", str(port)],
                    f"broker inbox: --bind 127.0.0.1 --port {port}: port {port} on 127.0.0.1 is "
                    "in use (another inbox?): pass another port, or 0 for any free one",
                ),
                (
                    ["inbox", store, "--token-file", str(weak)],
                    f"broker inbox: --token-file {weak}: the token must be a secret of at least "
                    "16 characters",
                ),
                (
                    ["inbox", store, "--token-file", str(nowhere)],
                    f"broker inbox: cannot use '{nowhere}'",
                ),
                (["inbox", store, "--port", "70000"], "broker inbox: argument --port: must be"),
            ]
            for argv, message in cases:
                done = subprocess.run(
                    [sys.executable, "-m", "broker.cli", *argv],
                    capture_output=True,
                    text=True,
                    timeout=TIMEOUT,
                    check=False,
                )
                assert done.returncode == 2, argv
                assert done.stderr.startswith(message), done.stderr
                assert done.stderr.count("\n") == 1, done.stderr


def _send(stdin: IO[str], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message) + "\n")
    stdin.flush()


def _receive(stdout: IO[str], *, method: str | None = None, id_: int | None = None) -> Any:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stdout], [], [], deadline - time.monotonic())
        line = stdout.readline() if ready else ""
        assert line, "the agent closed stdout"
        frame = json.loads(line)
        if method is not None and frame.get("method") == method:
            return frame
        if id_ is not None and frame.get("id") == id_ and "method" not in frame:
            return frame
    pytest.fail(f"timed out waiting for {method or id_}")


def test_broker_acp_inbox_answers_the_editors_question_from_the_page(
    tmp_path: pathlib.Path,
) -> None:
    store = tmp_path / "acp.sqlite"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    argv = ["acp", "--store", str(store), "--inbox", "0"]
    with subprocess.Popen(
        [sys.executable, "-W", "error", "-m", "broker.cli", *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        try:
            line = proc.stderr.readline()
            assert line.startswith("broker inbox: http://127.0.0.1:"), line
            url, token = line.removeprefix("broker inbox: ").strip().split("/?token=")
            init = {"protocolVersion": 1}
            _send(proc.stdin, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
            _receive(proc.stdout, id_=1)
            new = {"cwd": str(workspace), "mcpServers": []}
            _send(proc.stdin, {"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": new})
            session_id = _receive(proc.stdout, id_=2)["result"]["sessionId"]
            prompt = {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]}
            _send(
                proc.stdin,
                {"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": prompt},
            )
            _receive(proc.stdout, method="session/request_permission")  # the editor is asked...
            status, listed = call(f"{url}/api/pending", token=token)  # ...and the page shows it
            assert status == 200
            (question,) = listed["questions"]
            assert question["toolName"] == "bash"
            answer = {"id": question["id"], "outcome": "allowed-once", "by": "alice"}
            assert call(f"{url}/api/answer", token=token, body=answer)[0] == 200
            done = _receive(proc.stdout, id_=3)
            assert done["result"]["stopReason"] == "end_turn"
            proc.stdin.close()
            assert proc.wait(timeout=TIMEOUT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    with open_sqlite_reader(store) as reader:
        [info] = reader.sessions()
        decided = [
            event
            for event in (decode_event(row.line) for row in reader.rows(info.session_id))
            if isinstance(event, ApprovalDecided)
        ]
    assert [(d.id, d.outcome, d.answered_by) for d in decided] == [
        (question["id"], Outcome.ALLOWED_ONCE, "alice")
    ]
    assert (workspace / "escalated.txt").read_text() == "escalated\n"
