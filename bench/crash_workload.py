"""A broker workload for the crash loop: run it, SIGKILL it, check the log.

Usage: ``python -m bench.crash_workload STORE SEED``

Several sessions run turns through a real broker on the store STORE names (an SQLite file,
synchronous=FULL; or a ``postgresql://`` URL, with leases of :data:`LEASE_TTL` seconds so the
next round can take the killed sessions over soon) and ask questions that a scripted answerer
decides (some after a pause, so a kill often lands while a question is open). After each
``request()`` returns — both audit events durable — it prints, flushed:
``ack <session> <call-id> <outcome>``. Runs until killed (or 30 s at most).
"""

from __future__ import annotations

import random
import sys

import trio

from broker import (
    AnswerFn,
    AnswerNext,
    ApprovalRequest,
    Broker,
    EventStore,
    Outcome,
    Session,
    open_broker,
)
from broker.store import parse_store_url
from broker.store._url import PostgresUrl
from broker.store.postgres import open_postgres_store

SESSIONS = 8
MAX_SECONDS = 30
#: Seconds a killed workload's sessions stay leased on PostgreSQL.
LEASE_TTL = 1.0


async def _session(broker: Broker, session: Session, rng: random.Random) -> None:
    for turn in range(1_000_000):
        async with session.turn():
            for question in range(rng.randint(1, 4)):
                call_id = f"{session.id[:8]}-{turn}-{question}"
                outcome = await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash", call_id=call_id)
                )
                sys.stdout.write(f"ack {session.id} {call_id} {outcome.value}\n")
                sys.stdout.flush()


async def main(path: str, seed: int) -> None:
    """Run the workload on the store at *path* until killed."""
    rng = random.Random(seed)

    async def answerer(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        if rng.random() < 0.3:
            await trio.sleep(rng.uniform(0, 0.01))
        else:
            await trio.lowlevel.checkpoint()
        return rng.choice([Outcome.ALLOWED_ONCE, Outcome.REJECTED])

    where = parse_store_url(path)
    if isinstance(where, PostgresUrl):
        async with open_postgres_store(where.dsn, lease_ttl=LEASE_TTL) as store:
            await _run(store, seed, answerer)
    else:
        await _run(path, seed, answerer)


async def _run(store: EventStore | str, seed: int, answerer: AnswerFn) -> None:
    async with open_broker(store=store) as broker, broker.answerer(answerer):
        with trio.move_on_after(MAX_SECONDS):
            async with trio.open_nursery() as nursery:
                for index in range(SESSIONS):
                    session = await broker.start_session()
                    nursery.start_soon(_session, broker, session, random.Random(f"{seed}-{index}"))


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
