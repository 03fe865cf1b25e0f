"""A broker process for the takeover tests: run it, kill -9 or SIGSTOP it, take its session over.

Usage: ``python tests/takeover_workload.py DSN LEASE_TTL TAG (new | ID | try:ID) [QUESTIONS]``

Opens a broker on the PostgreSQL store at DSN (leases of LEASE_TTL seconds), creates a session
(``new``) or resumes ID — waiting, at most 30 s, while another process holds a live lease on
it; with ``try:ID`` it tries once and, refused, prints ``owned <message>`` and exits with
status 4 — and asks questions in turns: each with the call id ``TAG-N``, decided by an
answerer that allows or rejects (sometimes after a few milliseconds, so a kill often finds a
question open). Prints, flushed:

* ``session <id> <seq>`` once it owns the session (``seq``: its log's length then);
* ``ack <call id> <outcome>`` after each ``request()`` returned — both audit events durable;
* ``failed <error type>: <message>`` when a question could not be put (its session was taken
  over: the broker failed it closed), then exits with status 3;
* ``done`` after QUESTIONS questions (default: run until killed, 60 s at most), then closes the
  broker cleanly (giving the lease back).
"""

from __future__ import annotations

import hashlib
import sys

import trio

from broker import (
    AnswerNext,
    ApprovalRequest,
    AuditAppendError,
    BrokerError,
    Outcome,
    SessionOwnedError,
    open_broker,
)
from broker.store.postgres import open_postgres_store

MAX_SECONDS = 60
QUESTIONS_PER_TURN = 3


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _answer(req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    digest = hashlib.sha256((req.call_id or "").encode()).digest()
    if digest[0] < 64:
        await trio.sleep(digest[1] / 50_000)  # up to ~5 ms: a kill may land meanwhile
    else:
        await trio.lowlevel.checkpoint()
    return Outcome.ALLOWED_ONCE if digest[2] % 2 else Outcome.REJECTED


async def main(dsn: str, ttl: float, tag: str, which: str, questions: int | None) -> int:
    async with (
        open_postgres_store(dsn, lease_ttl=ttl) as store,
        open_broker(store=store) as broker,
        broker.answerer(_answer),
    ):
        if which == "new":
            session = await broker.start_session()
        elif which.startswith("try:"):  # once, without waiting for the lease
            try:
                session = await broker.start_session(resume=which[4:])
            except SessionOwnedError as exc:
                _say(f"owned {exc}")
                return 4
        else:
            with trio.fail_after(30):
                while True:
                    try:
                        session = await broker.start_session(resume=which)
                    except SessionOwnedError:
                        await trio.sleep(0.05)
                    else:
                        break
        _say(f"session {session.id} {len(await store.read(session.id))}")
        asked = 0
        with trio.move_on_after(MAX_SECONDS):
            try:
                while questions is None or asked < questions:
                    async with session.turn():
                        for _ in range(QUESTIONS_PER_TURN):
                            if questions is not None and asked >= questions:
                                break
                            call_id = f"{tag}-{asked}"
                            asked += 1
                            outcome = await broker.request(
                                ApprovalRequest(
                                    agent=session.agent, tool_name="bash", call_id=call_id
                                )
                            )
                            _say(f"ack {call_id} {outcome.value}")
            except (AuditAppendError, BrokerError) as exc:
                _say(f"failed {type(exc).__name__}: {exc}".replace("\n", " "))
                return 3
        _say("done")
        await session.aclose()
    return 0


if __name__ == "__main__":
    count = int(sys.argv[5]) if len(sys.argv) > 5 else None
    sys.exit(trio.run(main, sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], count))
