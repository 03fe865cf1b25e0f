"""Private by default: what the broker creates for a store is the owner's alone (files 0600,
folders 0700) whatever the umask; an existing store with wider permissions is used with one
warning naming the fix; a token file others can read, or that is not yours, is refused."""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import stat
import subprocess
import sys
from collections.abc import Iterator

import pytest

from broker import ApprovalRequest, open_broker
from broker._private_files import check_secret_file, make_private_dirs
from broker.store import open_sqlite_store

pytestmark = pytest.mark.slow

UMASKS = [pytest.param(0o000, id="umask-000"), pytest.param(0o022, id="umask-022")]


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", UMASKS)
async def test_a_new_store_and_its_side_files_are_the_owners_alone(
    tmp_path: pathlib.Path, mask: int
) -> None:
    path = tmp_path / "log.sqlite"
    with umask(mask):
        async with open_broker(store=str(path)) as broker:
            async with broker.open_session() as session, session.turn():
                await broker.request(ApprovalRequest(agent=session.agent, tool_name="bash"))
            side = {p.name: mode(p) for p in tmp_path.iterdir()}
    assert side == {
        "log.sqlite": 0o600,
        "log.sqlite-wal": 0o600,
        "log.sqlite-shm": 0o600,
        "log.sqlite.lock": 0o600,
    }


@pytest.mark.parametrize("mask", UMASKS)
def test_folders_made_for_state_are_0700(tmp_path: pathlib.Path, mask: int) -> None:
    target = tmp_path / "state" / "broker" / "deep"
    with umask(mask):
        make_private_dirs(target)
    assert [mode(p) for p in (tmp_path / "state", target.parent, target)] == [0o700] * 3


async def test_an_existing_store_others_can_read_is_used_with_one_warning(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "log.sqlite"
    async with open_sqlite_store(str(path)):
        pass
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="broker.files"):
        async with open_sqlite_store(str(path)):
            pass
    warnings = [r.getMessage() for r in caplog.records if r.name == "broker.files"]
    assert warnings == [
        f"{path} is readable by others (mode 0644): it holds the agents' commands and reasons; "
        f"chmod 600 {path} to keep it private"
    ]
    assert mode(path) == 0o644  # the user's choice stays


def cli(*argv: str, mask: int = 0o022) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.umask(mask),
    )


@pytest.mark.parametrize("mask", UMASKS)
def test_a_demo_and_an_export_leave_only_private_files(tmp_path: pathlib.Path, mask: int) -> None:
    store = tmp_path / "run" / "demo.sqlite"
    store.parent.mkdir()
    done = cli("demo", "--store", str(store), "--answer", "allow", mask=mask)
    assert done.returncode == 0, done.stderr
    made = {p.name: mode(p) for p in store.parent.iterdir()}
    assert "demo.sqlite" in made
    assert set(made.values()) == {0o600}, made
    out = tmp_path / "export" / "all"
    done = cli("log", "export", str(store), "--out", str(out), mask=mask)
    assert done.returncode == 0, done.stderr
    assert mode(out) == 0o700
    assert mode(out.parent) == 0o700
    files = list(out.iterdir())
    assert files
    assert {mode(f) for f in files} == {0o600}
    one = tmp_path / "one.jsonl"
    [session] = [f.stem for f in files if f.suffix == ".jsonl"]
    done = cli("log", "export", str(store), "--session", session, "--out", str(one), mask=mask)
    assert done.returncode == 0, done.stderr
    assert mode(one) == 0o600


def test_a_token_file_others_can_read_is_refused_as_ssh_does(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 40 + "\n")
    token.chmod(0o640)
    with pytest.raises(
        PermissionError,
        match=rf"^--token-file {token}: group or others can read it \(mode 0640\); a secret must "
        rf"be yours alone: chmod 600 {token}$",
    ):
        check_secret_file(token, "--token-file")
    done = cli("inbox", str(tmp_path / "log.sqlite"), "--token-file", str(token))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"chmod 600 {token}" in done.stderr
    token.chmod(0o600)
    check_secret_file(token, "--token-file")  # now it is a secret


@pytest.mark.skipif(os.geteuid() != 0, reason="a file owned by another user needs root")
def test_a_token_file_someone_else_owns_is_refused(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 40 + "\n")
    token.chmod(0o600)
    os.chown(token, 65534, 65534)
    with pytest.raises(PermissionError, match=r"owned by uid 65534, not by you \(uid 0\)"):
        check_secret_file(token, "--token-file")


@pytest.mark.parametrize("mask", UMASKS)
def test_the_inbox_writes_a_missing_token_file_private(tmp_path: pathlib.Path, mask: int) -> None:
    from broker.cli._inbox import _token

    token = tmp_path / "token"
    with umask(mask):
        made = _token(token)
    assert mode(token) == 0o600
    assert token.read_text().strip() == made
    assert _token(token) == made  # read back the next time
