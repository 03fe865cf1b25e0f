"""Shared helpers. The public fixtures come from :mod:`broker.testing`, as users would get them."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from broker import MemoryStore, encode_event

if TYPE_CHECKING:
    from broker import Broker, Event, Session

pytest_plugins = ["broker.testing", "pytester"]


def log_of(broker: Broker, session: Session) -> list[Event]:
    """The events of *session* as the (in-memory) store holds them."""
    return cast(MemoryStore, broker.store).read_nowait(session.id)


def lines_of(broker: Broker, session: Session) -> list[str]:
    """The encoded JSON lines of *session*'s log."""
    return [encode_event(event) for event in log_of(broker, session)]


def types_of(broker: Broker, session: Session) -> list[str]:
    """The ``type`` tags of *session*'s log, in order."""
    return [event.TYPE for event in log_of(broker, session)]
