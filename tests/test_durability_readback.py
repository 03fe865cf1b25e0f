"""Durability read back, never assumed (issue 40, item 3).

SQLite: ``PRAGMA synchronous`` is read from the writer's own connection — on the writer's
thread, the connection every commit goes through — for every way a store is opened for
writing: the library (``open_sqlite_store``, ``open_store``, ``open_broker``, a path or a
``sqlite:///`` URL) and each command that writes one (``broker demo``, ``acp``, ``serve``,
``mcp-gate``, ``people add``, ``log import``, ``chaos --store``, as real processes: each logs
what its store's writer read back). FULL by default, NORMAL when asked; a connection that
reports less than asked fails the open. The demo prints what the connection reports.

PostgreSQL: the writer reads ``synchronous_commit`` and ``fsync`` from the server on its own
connection and warns, once per store, when the server would acknowledge a commit it has not
made durable (tested on a fresh database of the local server; fsync, a server-wide setting, by
the decision function).
"""

from __future__ import annotations

import functools
import logging
import pathlib
import signal
import sqlite3
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
import pytest
import trio

from broker import ApprovalGrant, Outcome, TurnStart, open_broker
from broker.store import (
    EventStore,
    SqliteStore,
    StoreError,
    StoreOpenError,
    open_sqlite_reader,
    open_sqlite_store,
    open_store,
)
from broker.store.postgres import _backend as postgres_backend
from broker.store.postgres import _schema as postgres_schema
from broker.store.postgres import open_postgres_store
from broker.store.postgres._schema import ServerDurability, durability_warning
from broker.store.sqlite import _backend as sqlite_backend
from broker.store.sqlite import _schema as sqlite_schema

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: SQLite's numbers for PRAGMA synchronous.
FULL, NORMAL = 2, 1
#: What a store's open logs on ``broker.store``, SQLite.
READ_BACK = "{label} open for writing: synchronous={level}, read back from the writer's connection"


async def writer_connection_says(store: SqliteStore) -> int:
    """``PRAGMA synchronous`` as the writer's own connection answers it now, on the writer's
    own thread (the store must be idle: the thread runs one job at a time)."""
    writer = store._writer
    backend = writer.backend
    assert isinstance(backend, sqlite_backend.SqliteBackend)
    assert not writer._thread.busy

    def read() -> int:
        conn = backend._conn
        assert conn is not None
        (level,) = conn.execute("PRAGMA synchronous").fetchone()
        assert isinstance(level, int)
        return level

    return await writer._thread.run(read)


def _via_sqlite_store(path: pathlib.Path) -> AbstractAsyncContextManager[EventStore]:
    return open_sqlite_store(path)


def _via_open_store_path(path: pathlib.Path) -> AbstractAsyncContextManager[EventStore]:
    return open_store(str(path))


def _via_open_store_url(path: pathlib.Path) -> AbstractAsyncContextManager[EventStore]:
    return open_store(f"sqlite://{path}")


@asynccontextmanager
async def _via_broker_path(path: pathlib.Path) -> AsyncIterator[EventStore]:
    async with open_broker(store=path) as broker:
        yield broker.store


@asynccontextmanager
async def _via_broker_url(path: pathlib.Path) -> AsyncIterator[EventStore]:
    async with open_broker(store=f"sqlite://{path}") as broker:
        yield broker.store


OPENERS: dict[str, Callable[[pathlib.Path], AbstractAsyncContextManager[EventStore]]] = {
    "open_sqlite_store(path)": _via_sqlite_store,
    "open_store(path)": _via_open_store_path,
    "open_store(sqlite:///)": _via_open_store_url,
    "open_broker(store=path)": _via_broker_path,
    "open_broker(store=sqlite:///)": _via_broker_url,
}


# ----------------------------------------------------------------------- SQLite, the library


@pytest.mark.parametrize("how", list(OPENERS))
async def test_every_library_opener_commits_with_full(how: str, tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.sqlite"
    with trio.fail_after(20):
        async with OPENERS[how](path) as store:
            assert isinstance(store, SqliteStore)
            assert await writer_connection_says(store) == FULL
            assert store.synchronous == "FULL"
            await store.append("s", [TurnStart(turn=1)])  # committed through that connection
            assert await writer_connection_says(store) == FULL


async def test_normal_when_asked_is_what_the_connection_reports(tmp_path: pathlib.Path) -> None:
    """The store reports what the connection says, not a constant: NORMAL when asked."""
    with trio.fail_after(20):
        async with open_sqlite_store(tmp_path / "s.sqlite", synchronous="NORMAL") as store:
            assert await writer_connection_says(store) == NORMAL
            assert store.synchronous == "NORMAL"
        # The broker on a store opened so says the same.
        async with (
            open_sqlite_store(tmp_path / "b.sqlite", synchronous="NORMAL") as store,
            open_broker(store=store) as broker,
        ):
            assert isinstance(broker.store, SqliteStore)
            assert broker.store.synchronous == "NORMAL"


async def test_the_open_logs_what_it_read_back(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.sqlite"
    with caplog.at_level(logging.INFO, logger="broker.store"), trio.fail_after(20):
        async with open_sqlite_store(path, synchronous="NORMAL"):
            pass
    told = [r.getMessage() for r in caplog.records if r.name == "broker.store"]
    assert told == [READ_BACK.format(label=f"sqlite store '{path}'", level="NORMAL")]


@pytest.mark.parametrize("level", ["OFF", "NORMAL"])
async def test_a_connection_that_syncs_less_than_asked_fails_the_open(
    level: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read back, never assumed: a writer connection that ends up weaker than asked (an
    overridden pragma) is refused before anything is written; the lock is released."""
    real = sqlite_schema.connect_writer  # what sqlite_backend calls

    def overridden(path: str, synchronous: Any) -> sqlite3.Connection:
        conn = real(path, synchronous)
        conn.execute(f"PRAGMA synchronous = {level}")
        return conn

    monkeypatch.setattr(sqlite_backend, "connect_writer", overridden)
    path = tmp_path / "s.sqlite"
    with trio.fail_after(20):
        with pytest.raises(StoreOpenError) as raised:
            async with open_sqlite_store(path):
                pytest.fail("opened")  # pragma: no cover
        assert str(raised.value) == (
            f"cannot open store file '{path}': the writer's connection reports "
            f"synchronous={level} after synchronous=FULL was set, so an acknowledged append "
            "could be lost; use an sqlite build whose PRAGMA synchronous is not overridden "
            "(compile options, a custom vfs)"
        )
        # NORMAL asked and NORMAL reported is what was asked: it opens.
        if level == "NORMAL":
            async with open_sqlite_store(path, synchronous="NORMAL") as store:
                assert store.synchronous == "NORMAL"
        monkeypatch.undo()
        async with open_sqlite_store(path) as store:  # the lock was released
            assert store.synchronous == "FULL"


# ----------------------------------------------------------------------- SQLite, the commands

# Runs the broker command line with the broker.store logger shown at INFO on stderr, for the
# commands that set up no logging of their own (people, log, chaos).
_WITH_STORE_LOG = (
    "import logging, sys; handler = logging.StreamHandler(sys.stderr); "
    "store_log = logging.getLogger('broker.store'); store_log.addHandler(handler); "
    "store_log.setLevel(logging.INFO); from broker.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _broker(*argv: str, timeout: float = 60, with_store_log: bool = False) -> str:
    """Run ``broker ARGV`` to its end (stdin closed); its stdout + stderr."""
    prefix = ["-c", _WITH_STORE_LOG] if with_store_log else ["-m", "broker.cli"]
    done = subprocess.run(
        [sys.executable, "-W", "error", *prefix, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def _read_back(path: pathlib.Path, level: str = "FULL") -> str:
    return READ_BACK.format(label=f"sqlite store '{path}'", level=level)


@pytest.mark.slow
def test_broker_demo_prints_what_the_writer_connection_reports(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "demo.sqlite"
    workspace = str(tmp_path / "ws")
    out = _broker("demo", "--answer", "reject", "--workspace", workspace, "--store", str(path))
    assert f"session log: {path}  (SQLite, synchronous=FULL; kept after the demo)" in out


@pytest.mark.slow
async def test_the_demo_line_is_read_back_not_written(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's own path (open_broker(store=PATH)) with the store opened NORMAL: it says
    NORMAL. A fixed string would still say FULL."""
    from broker.cli import _demo
    from broker.store import _open

    monkeypatch.setattr(
        _open, "open_sqlite_store", functools.partial(open_sqlite_store, synchronous="NORMAL")
    )
    path = tmp_path / "demo.sqlite"
    (tmp_path / "ws").mkdir()
    with trio.fail_after(60):
        status = await _demo._demo(Outcome.REJECTED, tmp_path / "ws", path)
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"session log: {path}  (SQLite, synchronous=NORMAL; kept after the demo)" in out


def test_broker_acp_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "acp.sqlite"
    assert _read_back(path) in _broker("acp", "--store", str(path), "--log-level", "INFO")


def test_broker_mcp_gate_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gate.sqlite"
    upstream = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    out = _broker("mcp-gate", "--store", str(path), "--log-level", "INFO", "--", *upstream)
    assert _read_back(path) in out


def test_broker_serve_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "serve.sqlite"
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o700)
    argv = ["serve", "--store", str(path), "--socket", str(folder / "s.sock")]
    with subprocess.Popen(
        [sys.executable, "-W", "error", "-m", "broker.cli", *argv, "--log-level", "INFO"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as serve:
        try:
            assert serve.stderr is not None
            lines = []
            for line in serve.stderr:  # bounded: the test's timeout, and the kill below
                lines.append(line)
                if "listening on" in line:
                    break
            serve.send_signal(signal.SIGINT)
            rest, _ = serve.communicate(timeout=30)
        finally:
            if serve.poll() is None:  # pragma: no cover - only when the test failed
                serve.kill()
                serve.wait(timeout=10)
    assert any(_read_back(path) in line for line in lines), "".join(lines) + rest


def test_broker_people_add_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "people.sqlite"
    out = _broker("people", "add", str(path), "alice", with_store_log=True)
    assert _read_back(path) in out


async def test_broker_log_import_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "source.sqlite"
    with trio.fail_after(20):
        async with open_sqlite_store(source) as store:
            await store.append("s", [TurnStart(turn=1), ApprovalGrant(tool_name="edit")])
    exported = tmp_path / "s.jsonl"
    run = functools.partial(trio.to_thread.run_sync, abandon_on_cancel=True)
    with trio.fail_after(120):
        await run(_broker, "log", "export", str(source), "--session", "s", "--out", str(exported))
        path = tmp_path / "imported.sqlite"
        out = await run(
            functools.partial(
                _broker, "log", "import", str(path), str(exported), with_store_log=True
            )
        )
    assert _read_back(path) in out
    with open_sqlite_reader(path) as reader:
        assert [row.seq for row in reader.rows("s")] == [1, 2]


def test_broker_chaos_on_a_store_logs_what_its_writer_read_back(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "chaos.sqlite"
    out = _broker("chaos", "--store", str(path), "--asks", "5", with_store_log=True, timeout=120)
    assert _read_back(path) in out


# ----------------------------------------------------------------------- PostgreSQL

_LABEL = "postgresql store 'postgresql://u@h/d'"
_SYNC_FIX = (
    "synchronous_commit is 'off' on the writer's connection, so the server answers a commit "
    "before its wal is flushed and a server crash can lose it; set synchronous_commit = on for "
    "this role or database, and connect without a pooler that drops session settings"
)
_FSYNC_FIX = (
    "fsync is 'off' on the server, so it never forces its wal to disk and a power cut or an os "
    "crash can lose it; set fsync = on in postgresql.conf and reload the server"
)


@pytest.mark.parametrize("synchronous_commit", ["on", "local", "remote_write", "remote_apply"])
def test_a_server_that_flushes_before_it_answers_is_not_warned_about(
    synchronous_commit: str,
) -> None:
    assert durability_warning(_LABEL, synchronous_commit, "on") is None
    assert (
        ServerDurability(synchronous_commit=synchronous_commit, fsync="on").warning(_LABEL) is None
    )


def test_a_server_that_answers_before_it_is_durable_is_warned_about() -> None:
    head = f"{_LABEL}: acknowledged appends may not survive a crash: "
    assert durability_warning(_LABEL, "off", "on") == head + _SYNC_FIX
    assert durability_warning(_LABEL, "on", "off") == head + _FSYNC_FIX
    assert durability_warning(_LABEL, "local", "off") == head + _FSYNC_FIX
    assert durability_warning(_LABEL, "off", "off") == head + _SYNC_FIX + "; and " + _FSYNC_FIX
    # A value this broker does not know is not taken for durable.
    unknown = durability_warning(_LABEL, "", "on")
    assert unknown is not None
    assert "synchronous_commit is ''" in unknown
    assert durability_warning(_LABEL, "on", "") is not None


def _sql(dsn: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def _store_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "broker.store" and r.levelno == level
    ]


async def test_postgres_writer_reads_what_the_server_does_with_a_commit(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database's default is off; the writer's connection sets on and reads it back: the
    store's commits are durable, so nothing is warned about (on a server with fsync on)."""
    database = urllib.parse.urlsplit(postgres_dsn).path.lstrip("/")
    _sql(postgres_dsn, f'ALTER DATABASE "{database}" SET synchronous_commit = off')
    assert _sql(postgres_dsn, "SHOW synchronous_commit") == [("off",)]
    ((fsync,),) = _sql(postgres_dsn, "SHOW fsync")
    with caplog.at_level(logging.INFO, logger="broker.store"), trio.fail_after(30):
        async with open_postgres_store(postgres_dsn) as store:
            assert store.durability == ServerDurability(synchronous_commit="on", fsync=fsync)
            await store.append("s", [TurnStart(turn=1)])
    label = f"postgresql store '{postgres_dsn}'"
    assert _store_records(caplog, logging.INFO) == [
        f"{label} open for writing: synchronous_commit=on, fsync={fsync}, read from the server "
        "on the writer's connection"
    ]
    warned = _store_records(caplog, logging.WARNING)
    assert warned == ([] if fsync == "on" else [durability_warning(label, "on", fsync)])


async def test_postgres_writer_warns_once_per_store_when_commits_are_not_durable(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer connection whose ``SET synchronous_commit = on`` did not stick (as behind a
    pooler that drops session settings, on a database whose default is off) is read back as
    off and warned about: once per store, also after the connection is lost and made again."""
    database = urllib.parse.urlsplit(postgres_dsn).path.lstrip("/")
    _sql(postgres_dsn, f'ALTER DATABASE "{database}" SET synchronous_commit = off')
    real = postgres_schema.connect  # what postgres_backend calls

    def settings_dropped(dsn: str) -> Any:
        conn = real(dsn)
        conn.execute("RESET synchronous_commit")  # back to the database's default: off
        conn.commit()
        return conn

    monkeypatch.setattr(postgres_backend, "connect", settings_dropped)
    ((fsync,),) = _sql(postgres_dsn, "SHOW fsync")
    label = f"postgresql store '{postgres_dsn}'"
    with caplog.at_level(logging.WARNING, logger="broker.store"), trio.fail_after(30):
        async with open_postgres_store(postgres_dsn) as store:
            assert store.durability == ServerDurability(synchronous_commit="off", fsync=fsync)
            await store.append("s", [TurnStart(turn=1)])
            # Lose the writer's connection: the next job connects (and reads) again.
            _sql(
                postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            )
            for _ in range(3):
                try:
                    await store.append("s", [ApprovalGrant(tool_name="edit")])
                    break
                except StoreError:  # the group in flight when the connection went: fails closed
                    await trio.sleep(0.1)
            assert await store.read("s") == [TurnStart(turn=1), ApprovalGrant(tool_name="edit")]
            assert store.durability.synchronous_commit == "off"
        assert _store_records(caplog, logging.WARNING) == [durability_warning(label, "off", fsync)]
        # Another store warns again: once per store, not once per process.
        async with open_postgres_store(postgres_dsn):
            pass
        assert len(_store_records(caplog, logging.WARNING)) == 2


async def test_postgres_store_opened_by_url_reads_it_too(postgres_dsn: str) -> None:
    with trio.fail_after(30):
        async with open_store(postgres_dsn) as store, open_broker(store=store) as broker:
            assert broker.store is store
            durability = getattr(store, "durability", None)
            assert isinstance(durability, ServerDurability)
            assert durability.synchronous_commit == "on"


def test_broker_serve_on_postgres_logs_what_its_writer_read(
    postgres_dsn: str, tmp_path: pathlib.Path
) -> None:
    ((fsync,),) = _sql(postgres_dsn, "SHOW fsync")
    folder = tmp_path / "sock"
    folder.mkdir(mode=0o700)
    argv = ["serve", "--store", postgres_dsn, "--socket", str(folder / "s.sock")]
    with subprocess.Popen(
        [sys.executable, "-W", "error", "-m", "broker.cli", *argv, "--log-level", "INFO"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as serve:
        try:
            assert serve.stderr is not None
            lines = []
            for line in serve.stderr:
                lines.append(line)
                if "listening on" in line:
                    break
            serve.send_signal(signal.SIGINT)
            rest, _ = serve.communicate(timeout=30)
        finally:
            if serve.poll() is None:  # pragma: no cover - only when the test failed
                serve.kill()
                serve.wait(timeout=10)
    told = f"synchronous_commit=on, fsync={fsync}, read from the server on the writer's connection"
    assert any(told in line for line in lines), "".join(lines) + rest
