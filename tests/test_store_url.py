"""Where a store lives, as given: a file path, ``sqlite:///path`` or ``postgresql://…``, and how
``open_broker``, the composition settings and the CLI take it."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
import trio

from broker import open_broker
from broker._composition import Composition, CompositionError
from broker.store import StoreOpenError, StoreUrlError, open_sqlite_reader, parse_store_url
from broker.store._url import PostgresUrl, SqliteUrl, redact_dsn

ACCEPTED_TEXT = "a file path, sqlite:///PATH or postgresql://… (or postgres://…)"
ACCEPTED = re.escape(ACCEPTED_TEXT)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sessions.sqlite", SqliteUrl("sessions.sqlite")),
        ("logs/a b.sqlite", SqliteUrl("logs/a b.sqlite")),
        ("/var/lib/broker/s.db", SqliteUrl("/var/lib/broker/s.db")),
        (pathlib.Path("rel/s.db"), SqliteUrl("rel/s.db")),
        ("odd:name.db", SqliteUrl("odd:name.db")),  # no "://": a file name, as before
        ("sqlite:///var/b.db", SqliteUrl("/var/b.db")),
        ("SQLite:///var/b.db", SqliteUrl("/var/b.db")),
        ("sqlite:///tmp/a%20b.db", SqliteUrl("/tmp/a b.db")),
        ("postgresql://broker@db/broker", PostgresUrl("postgresql://broker@db/broker")),
        ("postgres://127.0.0.1:5432/test", PostgresUrl("postgres://127.0.0.1:5432/test")),
        ("postgresql:///test", PostgresUrl("postgresql:///test")),
    ],
)
def test_a_store_url_names_its_store(given: str | os.PathLike[str], expected: object) -> None:
    assert parse_store_url(given) == expected


@pytest.mark.parametrize("given", ["mysql://x", "http://x", "file:///tmp/x.db", "HTTPS://u@h/"])
def test_any_other_url_is_refused_naming_the_accepted_forms(given: str) -> None:
    scheme = given.split("://")[0].lower()
    with pytest.raises(
        ValueError,
        match=rf"^store must be {ACCEPTED}, got a {scheme}:// URL: "
        r"pass a SQLite file path or a PostgreSQL URL$",
    ):
        parse_store_url(given)


def test_a_sqlite_url_must_name_a_file_by_its_absolute_path() -> None:
    for given in ("sqlite://relative.db", "sqlite:///"):
        with pytest.raises(
            StoreUrlError,
            match=rf"^store {re.escape(repr(given))} is not a sqlite URL of a file: write "
            r"sqlite:///PATH with an absolute path \(three slashes\), or pass the file path "
            r"itself$",
        ):
            parse_store_url(given)


def test_an_empty_store_is_refused_and_the_parameter_is_named() -> None:
    with pytest.raises(
        StoreUrlError,
        match=rf"^--store must be {ACCEPTED}, got an empty "
        r"string: name the store$",
    ):
        parse_store_url("", parameter="--store")


def test_a_password_never_shows_in_a_redacted_dsn() -> None:
    assert redact_dsn("postgresql://u:secret@h:5/db?x=1") == "postgresql://u:***@h:5/db?x=1"
    assert redact_dsn("postgresql://u@h/db") == "postgresql://u@h/db"
    assert "secret" not in str(PostgresUrl("postgres://u:secret@h/db"))


async def test_open_broker_refuses_an_unknown_url_before_anything_starts() -> None:
    with trio.fail_after(10):
        with pytest.raises(
            ValueError,
            match=rf"^store must be {ACCEPTED}, got a mysql:// URL: "
            r"pass a SQLite file path or a PostgreSQL URL$",
        ):
            async with open_broker(store="mysql://x"):
                pytest.fail("the broker must not start")  # pragma: no cover


@pytest.mark.parametrize("form", ["path", "pathlike", "url"])
async def test_open_broker_opens_sqlite_from_a_path_or_a_sqlite_url(
    tmp_path: pathlib.Path, form: str
) -> None:
    db = tmp_path / "s.sqlite"
    forms: dict[str, str | os.PathLike[str]] = {
        "path": str(db),
        "pathlike": db,
        "url": "sqlite://" + str(db),
    }
    store = forms[form]
    with trio.fail_after(10):
        async with open_broker(store=store) as broker, broker.open_session() as session:
            session_id = session.id
    with open_sqlite_reader(db) as reader:
        assert [info.session_id for info in reader.sessions()] == [session_id]


def test_the_composition_takes_a_url_and_resolves_only_paths(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('store = "logs/a.sqlite"\n')
    assert Composition.load(config).store == tmp_path / "logs/a.sqlite"
    config.write_text('store = "sqlite:///var/b.db"\n')
    assert Composition.load(config).store == pathlib.Path("/var/b.db")
    config.write_text('store = "postgresql://u:pw@db/broker"\n')
    assert Composition.load(config).store == "postgresql://u:pw@db/broker"
    assert Composition.load(store="postgres://db/b").store == "postgres://db/b"
    assert Composition.load(config, store=":memory:").store is None


def test_the_composition_refuses_another_url_by_its_key(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('store = "mysql://u:secret@x"\n')
    source = re.escape(repr(str(config)))
    with pytest.raises(
        CompositionError,
        match=rf'^config {source}: store: expected ":memory:", {ACCEPTED}, '
        r'got "mysql://u:\*\*\*@x"$',
    ):
        Composition.load(config)


def _broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "broker.cli", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("command", "line"),
    [
        (
            ["acp", "--store", "http://x"],
            f'broker acp: settings: store: expected ":memory:", {ACCEPTED_TEXT}, got "http://x"',
        ),
        (
            ["demo", "--store", "http://x"],
            "broker demo: argument --store: expected a file path or sqlite:///PATH, got a URL "
            "of another kind: pass a SQLite file path (see broker demo --help)",
        ),
        (
            ["log", "verify", "mysql://x"],
            "broker log verify: argument store: expected a file path, sqlite:///PATH or "
            "postgresql://…: pass the store the broker writes (see broker log verify --help)",
        ),
        (
            ["demo", "--store", "postgresql://db/b"],
            "broker demo: argument --store: the demo reads its log back from a SQLite file, "
            "got a postgresql:// URL: pass a file path or sqlite:///PATH (see broker demo --help)",
        ),
    ],
)
def test_the_cli_refuses_a_bad_store_in_one_line(command: list[str], line: str) -> None:
    done = _broker(*command)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [line]


async def test_a_postgresql_url_reaches_the_postgresql_store() -> None:
    # Routed to broker.store.postgres (not taken for a file name): a server that does not
    # answer is one line naming the URL without its password.
    with trio.fail_after(20):
        with pytest.raises(
            StoreOpenError,
            match=r"^cannot connect to postgresql store 'postgresql://u:\*\*\*@127\.0\.0\.1:1/x': "
            r"connection failed: .*Connection refused; check the URL, the server and the "
            r"credentials$",
        ):
            async with open_broker(store="postgresql://u:pw@127.0.0.1:1/x"):
                pytest.fail("the broker must not start")  # pragma: no cover


async def test_without_psycopg_a_postgresql_url_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # psycopg is the optional extra "postgres": imported only when a store is opened.
    imported = [
        name
        for name in sys.modules
        if name == "psycopg" or name.startswith(("psycopg.", "broker.store.postgres._"))
    ]
    for name in imported:
        if name != "broker.store.postgres._store":
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with trio.fail_after(10):
        with pytest.raises(
            StoreOpenError,
            match=r"^cannot open postgresql store 'postgresql://u:\*\*\*@h/db': psycopg is not "
            r"installed \(.*\); install it with pip install 'trio-approval-broker\[postgres\]'$",
        ):
            async with open_broker(store="postgresql://u:pw@h/db"):
                pytest.fail("the broker must not start")  # pragma: no cover


def test_broker_log_reads_a_store_named_by_a_sqlite_url(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "s.sqlite"

    async def write() -> str:
        with trio.fail_after(10):
            async with open_broker(store=db) as broker, broker.open_session() as session:
                return session.id

    session_id = trio.run(write)
    for command in (["show"], ["verify"], ["export", "--session", session_id]):
        done = _broker("log", *command, "sqlite://" + str(db))
        assert done.returncode == 0, done.stderr
        assert done.stderr == "" or command[0] == "export"
    assert session_id in _broker("log", "show", "sqlite://" + str(db)).stdout


def test_broker_imports_without_psycopg() -> None:
    # psycopg is the optional "postgres" extra: a project that installed only broker (or
    # broker[testing]) imports the package, its pytest plugin and its command without it.
    script = (
        "import sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'psycopg' or name.startswith('psycopg.'):\n"
        "            raise ImportError('psycopg is not installed')\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "import broker, broker.testing, broker.store, broker.cli\n"
        "assert not [name for name in sys.modules if name.startswith('psycopg')]\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
