"""A PostgreSQL server for the tests: the machine's own if one answers, else a throwaway one.

Synopsis::

    dsn = server_dsn()                       # once per test session
    with fresh_database(dsn) as db_dsn:      # one database per test, dropped after
        ...

    with ThrowawayCluster.start() as cluster:    # a server of the test's own (to restart it)
        cluster.restart()

Which server, in this order:

1. ``BROKER_TEST_POSTGRES``: a DSN given by whoever runs the tests;
2. the machine's server on ``127.0.0.1:5432`` as ``postgres`` (trust auth), when it answers;
3. a throwaway cluster: ``initdb`` + ``pg_ctl`` from Debian's ``postgresql`` package (``make
   test`` installs it where it is missing), in a temporary directory, on a free port, listening
   on 127.0.0.1 and its own socket directory only; stopped when the test session ends. As root
   it runs as the ``postgres`` user (initdb refuses root); as anyone else, as that user.

Tests that need a server and find none of the three skip with the reason; ``make test`` never
gets there, because it installs the package.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pathlib
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator

import attrs

ENV_DSN = "BROKER_TEST_POSTGRES"
MACHINE_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Bound of one server command (initdb, pg_ctl start/stop).
COMMAND_TIMEOUT = 120


class NoServerError(RuntimeError):
    """No PostgreSQL server answers and none can be started here."""


def answers(dsn: str) -> bool:
    """Whether a server accepts a connection at *dsn* (within two seconds)."""
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]  # the newest installed major version
    on_path = shutil.which(name)
    if on_path is None:
        raise NoServerError(
            f"{name} is not installed: install Debian's postgresql package (make test does)"
        )
    return on_path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@attrs.define(eq=False)
class ThrowawayCluster:
    """A PostgreSQL cluster of the test's own: its data directory, port and socket directory.

    ``start()`` creates it and starts the server; ``stop()`` / ``restart()`` drive it (a test
    that loses its server connection on purpose restarts this one, never a shared server);
    leaving the ``with`` block stops it and removes its files.
    """

    root: pathlib.Path
    port: int
    user: str | None  # who runs the server: None = this process's user

    @property
    def data(self) -> pathlib.Path:
        return self.root / "data"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
        )
        if done.returncode != 0:
            raise NoServerError(
                f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr.strip()}"
            )

    @classmethod
    @contextlib.contextmanager
    def start(cls) -> Iterator[ThrowawayCluster]:
        root = pathlib.Path(tempfile.mkdtemp(prefix="broker-pg-"))
        user = "postgres" if os.geteuid() == 0 else None
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        cluster = cls(root=root, port=_free_port(), user=user)
        try:
            cluster._run(
                _bin("initdb"),
                "--pgdata",
                str(cluster.data),
                "--username",
                "postgres",
                "--auth",
                "trust",
                "--no-sync",
                "--encoding",
                "UTF8",
            )
            cluster.start_server()
            yield cluster
        finally:
            with contextlib.suppress(NoServerError, subprocess.TimeoutExpired):
                cluster.stop()
            shutil.rmtree(root, ignore_errors=True)

    def start_server(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._run(
            _bin("pg_ctl"),
            "start",
            "--pgdata",
            str(self.data),
            "--wait",
            "--log",
            str(self.root / "server.log"),
            "-o",
            options,
        )

    def stop(self, mode: str = "fast") -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(_bin("pg_ctl"), "stop", "--pgdata", str(self.data), "--wait", "-m", mode)

    def restart(self) -> None:
        """Stop the server (``immediate``: connections drop at once) and start it again."""
        self.stop("immediate")
        self.start_server()


_stack = contextlib.ExitStack()
_server: str | None = None


def server_dsn() -> str:
    """The DSN of a server for this test session (module doc); :class:`NoServerError` if none."""
    global _server
    if _server is None:
        given = os.environ.get(ENV_DSN)
        if given:
            _server = given
        elif answers(MACHINE_DSN):
            _server = MACHINE_DSN
        else:
            _server = _stack.enter_context(ThrowawayCluster.start()).dsn
    return _server


def stop_servers() -> None:
    """Stop the throwaway cluster, if this test session started one."""
    _stack.close()


@contextlib.contextmanager
def fresh_database(server: str) -> Iterator[str]:
    """A new, empty database on *server* for one test; dropped (connections forced out) after."""
    import psycopg

    parts = urllib.parse.urlsplit(server)
    if parts.scheme not in ("postgresql", "postgres"):
        raise NoServerError(f"{ENV_DSN} must be a postgresql:// URL, got {server!r}")
    name = f"broker_test_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
