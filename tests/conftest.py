"""Shared helpers. The public fixtures come from :mod:`broker.testing`, as users would get them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import pytest
from hypothesis import settings

from broker import MemoryStore, encode_event

from .postgres_server import NoServerError, fresh_database, server_dsn, stop_servers

if TYPE_CHECKING:
    from broker import Broker, Event, Session

pytest_plugins = ["broker.testing", "pytester"]

# Property tests check what holds, not how fast: a per-example deadline only measures how busy
# the machine is (an 8 ms example took 800 ms on a loaded 2-core CI machine). Benchmarks live in
# bench/.
settings.register_profile("broker", deadline=None)
settings.load_profile("broker")


def log_of(broker: Broker, session: Session) -> list[Event]:
    """The events of *session* as the (in-memory) store holds them."""
    return cast(MemoryStore, broker.store).read_nowait(session.id)


def lines_of(broker: Broker, session: Session) -> list[str]:
    """The encoded JSON lines of *session*'s log."""
    return [encode_event(event) for event in log_of(broker, session)]


def types_of(broker: Broker, session: Session) -> list[str]:
    """The ``type`` tags of *session*'s log, in order."""
    return [event.TYPE for event in log_of(broker, session)]


@pytest.fixture(scope="session")
def postgres_server() -> str:
    """A PostgreSQL server's DSN for this test session (see :mod:`tests.postgres_server`)."""
    try:
        return server_dsn()
    except NoServerError as exc:
        pytest.skip(f"no PostgreSQL server: {exc}")


@pytest.fixture
def postgres_dsn(postgres_server: str) -> Iterator[str]:
    """A fresh, empty database for this test (a ``postgresql://`` URL), dropped after it."""
    with fresh_database(postgres_server) as dsn:
        yield dsn


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the throwaway PostgreSQL cluster, if this run started one."""
    stop_servers()
