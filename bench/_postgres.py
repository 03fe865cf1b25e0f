"""A fresh PostgreSQL database per bench run, dropped after (shared by the PostgreSQL benches)."""

from __future__ import annotations

import os
import secrets
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager

#: The server the benches use unless told: $BROKER_BENCH_POSTGRES, else the local one.
SERVER = os.environ.get("BROKER_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def reachable(server: str) -> str | None:
    """None when *server* answers, else why not (the benches then say they skipped)."""
    try:
        import psycopg

        with psycopg.connect(server, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


@contextmanager
def fresh_database(server: str, prefix: str) -> Iterator[str]:
    """The URL of a new, empty database on *server*; dropped (connections forced out) after."""
    import psycopg

    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        parts = urllib.parse.urlsplit(server)
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
