"""A durable workload for the crash test: run it, SIGKILL it, check the store.

Usage: ``python tests/crash_workload.py STORE SEED``

Several sessions append concurrently through :class:`SqliteStore` what the service would:
turn/start, asked/decided pairs (some left waiting for a while, so a kill finds dangling asks),
remembered grants (decided + grant in one append), policy switches and turn/end. After each
``append`` returns — i.e. once it is acknowledged as durable — it prints, flushed, one line per
event: ``ack <session> <seq> <json line>``. It runs until killed (or for 30 s at most).
"""

from __future__ import annotations

import random
import sys
from typing import TYPE_CHECKING

import trio

from broker._codec import encode_event
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker._vocabulary import Outcome, Policy
from broker.store.sqlite import open_sqlite_store

if TYPE_CHECKING:
    from broker._events import Event
    from broker.store.sqlite import SqliteStore

SESSIONS = 6
MAX_SECONDS = 30


async def _session(store: SqliteStore, session_id: str, rng: random.Random) -> None:
    seq = 0

    async def append(*events: Event) -> None:
        nonlocal seq
        await store.append(session_id, events)
        lines = []
        for event in events:
            seq += 1
            lines.append(f"ack {session_id} {seq} {encode_event(event)}\n")
        sys.stdout.write("".join(lines))
        sys.stdout.flush()

    await store.create_session(session_id, None)
    for turn in range(1, 1_000_000):
        await append(TurnStart(turn=turn))
        for question in range(rng.randint(1, 4)):
            ask_id = f"{session_id}-t{turn}-q{question}-{rng.getrandbits(32):08x}"
            await append(ApprovalAsked(id=ask_id, tool_name=rng.choice(["bash", "edit", "web"])))
            if rng.random() < 0.3:
                await trio.sleep(rng.uniform(0, 0.01))
            roll = rng.random()
            if roll < 0.15:
                await append(
                    ApprovalDecided(id=ask_id, outcome=Outcome.ALLOWED_ONCE, remembered=True),
                    ApprovalGrant(tool_name="bash"),
                )
            else:
                await append(
                    ApprovalDecided(
                        id=ask_id,
                        outcome=rng.choice([Outcome.ALLOWED_ONCE, Outcome.REJECTED]),
                    )
                )
        if rng.random() < 0.1:
            await append(ApprovalPolicy(policy=rng.choice([Policy.ASK, Policy.NEVER])))
        await append(TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")))


async def main(path: str, seed: int) -> None:
    """Run the workload on the store at *path* until killed."""
    async with open_sqlite_store(path, checkpoint_every=7) as store:
        with trio.move_on_after(MAX_SECONDS):
            async with trio.open_nursery() as nursery:
                for index in range(SESSIONS):
                    rng = random.Random(f"{seed}-{index}")
                    nursery.start_soon(_session, store, f"s{index}", rng)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]))
