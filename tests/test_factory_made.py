"""``Broker`` and ``Session`` are made by their factories only: building one by hand is refused
at once, naming the factory (trio's ``NoPublicConstructor``)."""

from __future__ import annotations

import re

import pytest

from broker import Broker, Session, open_broker


def test_a_broker_by_hand_is_refused_naming_its_factory() -> None:
    with pytest.raises(
        TypeError,
        match=r"^Broker has no public constructor: it is made by open_broker\(\) or "
        r"serve_broker\(\); use that instead of Broker\(\.\.\.\)$",
    ):
        Broker()  # type: ignore[call-arg]


async def test_a_session_by_hand_is_refused_naming_its_factories() -> None:
    async with open_broker() as broker:
        with pytest.raises(
            TypeError,
            match=re.escape(
                "Session has no public constructor: it is made by broker.open_session(), "
                "broker.start_session() or broker.delegate(); use that instead of Session(...)"
            ),
        ):
            Session("id", None, broker)
        async with broker.open_session() as session:  # the factory still makes them
            assert isinstance(session, Session)
            assert isinstance(broker, Broker)
