"""A PostgreSQL store whose server restarts under it (issue 22 step 5): the appends waiting
on the lost connection fail closed, the store connects again with bounded backoff, and
nothing is duplicated or lost. The server is a throwaway cluster the test starts itself
(``initdb`` + ``pg_ctl`` on a free port), never the machine's shared one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from broker import (
    ApprovalGrant,
    ApprovalRequest,
    AuditAppendError,
    Outcome,
    open_broker,
)
from broker.store import StoreError
from broker.store._logtools import verify_reader
from broker.store.postgres import PostgresStore, open_postgres_store

from .postgres_server import NoServerError, ThrowawayCluster

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._reader import open_postgres_reader  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[ThrowawayCluster]:
    try:
        with ThrowawayCluster.start() as started:
            yield started
    except NoServerError as exc:
        pytest.skip(f"no throwaway PostgreSQL cluster here: {exc}")


async def _until_it_lands(store: PostgresStore, session_id: str, name: str) -> int:
    """Append a grant until it is acknowledged; how many attempts failed (closed) first."""
    failed = 0
    while True:
        try:
            await store.append(session_id, [ApprovalGrant(tool_name=name)])
        except StoreError:
            failed += 1
            await trio.sleep(0.1)
        else:
            return failed


async def test_a_restarted_server_fails_the_waiting_appends_and_the_store_reconnects(
    cluster: ThrowawayCluster,
) -> None:
    with trio.fail_after(90):
        async with open_postgres_store(cluster.dsn) as store:
            await store.create_session("s", None)
            await store.append("s", [ApprovalGrant(tool_name="before")])
            await trio.to_thread.run_sync(cluster.restart)  # every connection dropped
            failed = await _until_it_lands(store, "s", "after")
            assert failed <= 1  # the one on the dropped connection, failed closed
            assert await store.read("s") == [
                ApprovalGrant(tool_name="before"),
                ApprovalGrant(tool_name="after"),
            ]
            assert store.transactions_failed == failed
    with open_postgres_reader(cluster.dsn) as reader:
        verify_reader(reader)
        assert [row.seq for row in reader.rows("s")] == [1, 2]  # nothing duplicated


async def test_a_question_on_a_lost_connection_fails_closed_and_the_next_one_is_put(
    cluster: ThrowawayCluster,
) -> None:
    async def allow(_req: ApprovalRequest, _next: object) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    with trio.fail_after(90):
        async with (
            open_postgres_store(cluster.dsn) as store,
            open_broker(store=store) as broker,
            broker.answerer(allow),
        ):
            session = await broker.start_session()
            async with session.turn():
                bash = ApprovalRequest(agent=session.agent, tool_name="bash")
                assert await broker.request(bash) is Outcome.ALLOWED_ONCE
                await trio.to_thread.run_sync(cluster.restart)
                outcomes: list[object] = []
                for _ in range(20):
                    try:
                        outcomes.append(await broker.request(bash))
                    except AuditAppendError as exc:  # never allowed: fails closed
                        outcomes.append(type(exc))
                        await trio.sleep(0.1)
                    else:
                        break
                assert outcomes[-1] is Outcome.ALLOWED_ONCE
                assert all(o in (AuditAppendError, Outcome.ALLOWED_ONCE) for o in outcomes)
            await session.aclose()
    with open_postgres_reader(cluster.dsn) as reader:
        verify_reader(reader)
