"""People with identities (issue 35, item 1): ``broker people add|list|remove`` on the store,
personal tokens kept only as hashes, and ``broker answer`` knowing who answers — from a token
file or ``$BROKER_TOKEN``, or the OS user on a local file — never from a token on argv, never
from a free ``--by`` once people are registered. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import pathlib
import pwd
import sqlite3
import subprocess
import sys

import pytest

from .test_remote_processes import asker, broker, decision_of, store, wait_pending

__all__ = ["store"]  # the fixture, parametrized over SQLite and PostgreSQL

pytestmark = pytest.mark.slow


def add(store: str, name: str, *groups: str) -> str:
    """``broker people add``; the token it printed."""
    flags = [arg for group in groups for arg in ("--group", group)]
    added = broker("people", "add", store, name, *flags)
    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    assert lines[0].startswith(f"added {name}")
    assert lines[0].endswith("their token, shown only now:")
    assert lines[1].startswith("bkr_")
    return lines[1]


def token_file(tmp_path: pathlib.Path, token: str, name: str = "token") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def answer_with(
    store: str, *argv: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "answer", store, *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_people_are_added_listed_and_removed(store: str) -> None:
    if not store.startswith("postgresql://"):
        broker("log", "show", store)  # nothing yet: the first add makes the table
    alice = add(store, "alice", "ops", "ops", "dev")
    add(store, "bob")
    listed = json.loads(broker("people", "list", store, "--json").stdout)
    assert [(p["name"], p["groups"]) for p in listed] == [("alice", ["ops", "dev"]), ("bob", [])]
    text = broker("people", "list", store).stdout
    assert text.splitlines()[0].startswith("alice")
    assert alice not in text
    again = broker("people", "add", store, "alice")
    assert again.returncode == 2
    assert "'alice' is registered already: broker people remove alice first" in again.stderr
    assert broker("people", "remove", store, "alice").returncode == 0
    gone = broker("people", "remove", store, "alice")
    assert gone.returncode == 1
    assert "no person named 'alice'" in gone.stdout
    bad = broker("people", "add", store, "Alice:root")
    assert bad.returncode == 2
    assert "name must be 1-64 lower-case letters" in bad.stderr


def test_the_store_keeps_only_the_tokens_hash(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "log.sqlite")
    token = add(path, "alice")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT * FROM board_people").fetchall()
        dumped = "\n".join(db.iterdump())
    assert len(rows) == 1
    assert token not in dumped
    assert token[4:] not in dumped


def test_an_answer_with_a_token_is_the_persons(store: str, tmp_path: pathlib.Path) -> None:
    token = add(store, "alice", "ops")
    secret = token_file(tmp_path, token)
    with asker(store) as a:
        (row,) = wait_pending(store)
        # Someone without a token cannot answer under any name once people exist.
        forged = answer_with(store, row["id"], "allow", "--by", "alice")
        assert forged.returncode == 1
        assert "this store has registered people: --by names no one" in forged.stderr
        mismatch = answer_with(
            store, row["id"], "allow", "--token-file", str(secret), "--by", "bob"
        )
        assert mismatch.returncode == 1
        assert "your token says you are alice" in mismatch.stderr
        answered = answer_with(store, row["id"], "reject", "--token-file", str(secret))
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout == f"question {row['id']}: rejected by alice\n"
        assert decision_of(a)["answeredBy"] == "alice"
    with asker(store) as b:  # the environment works as well as a file
        (row,) = wait_pending(store)
        answered = answer_with(store, row["id"], "allow", env={"BROKER_TOKEN": token})
        assert answered.returncode == 0, answered.stderr
        assert decision_of(b)["answeredBy"] == "alice"


def test_a_removed_persons_token_stops_at_once(store: str, tmp_path: pathlib.Path) -> None:
    token = add(store, "alice")
    add(store, "bob")
    secret = token_file(tmp_path, token)
    with asker(store) as a:
        (row,) = wait_pending(store)
        assert broker("people", "remove", store, "alice").returncode == 0
        refused = answer_with(store, row["id"], "allow", "--token-file", str(secret))
        assert refused.returncode == 1
        assert "the token is no one's on this store" in refused.stderr
        bob = token_file(tmp_path, add(store, "carol"), "carol")  # still open to the others
        assert answer_with(store, row["id"], "reject", "--token-file", str(bob)).returncode == 0
        assert decision_of(a)["answeredBy"] == "carol"


def test_a_token_on_the_command_line_is_refused(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "log.sqlite")
    token = add(path, "alice")
    refused = answer_with(path, "q-1", "allow", "--token", token)
    assert refused.returncode == 2
    assert "a token never goes on the command line" in refused.stderr
    assert token not in refused.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "log.sqlite")
    secret = token_file(tmp_path, add(path, "alice"))
    secret.chmod(0o644)
    refused = answer_with(path, "q-1", "allow", "--token-file", str(secret))
    assert refused.returncode == 2
    assert "group or others can read it" in refused.stderr


def test_without_people_the_os_user_answers_a_local_file(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "log.sqlite")
    with asker(path) as a:
        (row,) = wait_pending(path)
        answered = answer_with(path, row["id"], "allow")
        assert answered.returncode == 0, answered.stderr
        me = pwd.getpwuid(os.geteuid()).pw_name
        assert decision_of(a)["answeredBy"] == f"uid:{me}"
