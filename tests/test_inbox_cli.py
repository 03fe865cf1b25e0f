"""``broker inbox STORE`` as its own process beside an asking process (``tests/remote_asker.py``):
it lists and answers through the store's board — SQLite across processes, PostgreSQL across
hosts — and refuses to start, in one line, where it cannot."""

from __future__ import annotations

import json
import pathlib
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from broker.inbox import InboxKeys

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
        assert decision_of(a) == {"id": row["id"], "outcome": "allowed-once", "answeredBy": "alice"}
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
                    ["inbox", store, "--token-file", str(missing)],
                    f"broker inbox: cannot use '{missing}'",
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
