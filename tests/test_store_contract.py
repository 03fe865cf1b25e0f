"""The :class:`~broker.store.EventStore` contract, written once and run against every store.

Each test takes the ``kind`` fixture, one entry of :data:`KINDS`: how to open that store in the
test's ``tmp_path``, how to read what its durable medium holds without going through the store
object, which faults it can be made to have, and the exact texts of its errors. A new store
joins the suite with one entry there (and :data:`KNOWN_VIOLATIONS` says, case by case, where a
store does not yet keep the contract: those cases are strict xfails).

Real stores run real threads, so these tests use real time bounded by ``trio.fail_after``, not
``autojump_clock`` (its clock would jump while a worker thread writes); none of them sleeps.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, cast

import attrs
import pytest
import trio

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalState,
    Event,
    Outcome,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
    decode_event,
)
from broker._projection import fold_all
from broker.store import MemoryStore, SqliteStore, StoreError, open_sqlite_reader, open_sqlite_store
from broker.store._logtools import verify_reader, verify_store
from broker.store._protocol import SessionRecord, StoreHead
from broker.store.postgres import PostgresStore, open_postgres_store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from broker.store import EventStore
    from broker.store._protocol import Durability


@attrs.frozen(kw_only=True)
class Texts:
    """A store's error texts, as ``str.format`` templates. Fields: ``where`` (the store's
    location, :attr:`StoreKind.where`), ``session``, ``seq``, ``ends``, ``cause``."""

    closed: str
    no_session: str
    out_of_sequence: str
    write_failed: str


@attrs.frozen(kw_only=True)
class StoreKind:
    """One kind of store, as the contract suite drives it."""

    # Open the store kept in the test's tmp_path. Opening it again there after it was closed
    # reopens the same logs (for a kind that can, see ``unable["reopen"]``).
    open: Callable[[Path], AbstractAsyncContextManager[EventStore]]
    # Where the store is, as its error texts name it.
    where: Callable[[Path], str]
    # What the durable medium holds of a session, read past the store object (None: it does not
    # hold the session). Synchronous: it is called from a ticket's done callback.
    durable_log: Callable[[EventStore, Path, str], list[Event] | None]
    # Make the next write fail with *cause*; with landed=True the write is stored all the same.
    fail_next_write: Callable[[EventStore, str, bool], None]
    # Undo ``fail_next_write`` if the fault outlives that one write.
    mend_writes: Callable[[EventStore], None]
    # Check the whole store's integrity (hash chains, pairing) after a test.
    verify: Callable[[Path], None]
    texts: Texts
    # What this kind cannot express, and why: "reopen", "landed failure".
    unable: Mapping[str, str] = attrs.field(factory=dict)

    def require(self, capability: str) -> None:
        """Skip the test, saying why, when this kind cannot express *capability*."""
        reason = self.unable.get(capability)
        if reason is not None:
            pytest.skip(reason)

    def text(self, template: str, tmp_path: Path, **fields: object) -> str:
        return template.format(where=self.where(tmp_path), **fields)


# ----------------------------------------------------------------------- memory


@asynccontextmanager
async def _open_memory(_tmp_path: Path) -> AsyncIterator[EventStore]:
    store = MemoryStore()
    try:
        yield store
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()


def _memory_log(store: EventStore, _tmp_path: Path, session_id: str) -> list[Event] | None:
    # The memory store's durability is the process: its own lists are the medium.
    memory = cast(MemoryStore, store)
    return memory.read_nowait(session_id) if session_id in memory.session_ids() else None


def _memory_fail(store: EventStore, cause: str, landed: bool) -> None:
    assert not landed
    cast(MemoryStore, store).fail_appends = cause


def _memory_mend(store: EventStore) -> None:
    cast(MemoryStore, store).fail_appends = None


# ----------------------------------------------------------------------- sqlite

SQLITE_FILE = "store.db"


@asynccontextmanager
async def _open_sqlite(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with open_sqlite_store(tmp_path / SQLITE_FILE) as store:
        yield store


def _sqlite_log(_store: EventStore, tmp_path: Path, session_id: str) -> list[Event] | None:
    # A connection of its own: it sees only what was committed.
    with open_sqlite_reader(tmp_path / SQLITE_FILE) as reader:
        if reader.session(session_id) is None:
            return None
        return [decode_event(row.line) for row in reader.rows(session_id)]


def _sqlite_fail(store: EventStore, cause: str, landed: bool) -> None:
    cast(SqliteStore, store).inject_commit_failure(sqlite3.OperationalError(cause), landed=landed)


def _sqlite_mend(_store: EventStore) -> None:
    """The injected failure is spent by the one write it failed."""


def _sqlite_verify(tmp_path: Path) -> None:
    verify_store(tmp_path / SQLITE_FILE)  # raises on a broken chain, pairing or turn


# ----------------------------------------------------------------------- postgres

# The database of each test, by its tmp_path (the ``kind`` fixture creates it, a fresh one per
# test, and drops it after).
_POSTGRES: dict[Path, str] = {}


@asynccontextmanager
async def _open_postgres(tmp_path: Path) -> AsyncIterator[EventStore]:
    async with open_postgres_store(_POSTGRES[tmp_path]) as store:
        yield store


def _postgres_log(_store: EventStore, tmp_path: Path, session_id: str) -> list[Event] | None:
    # A connection of its own: it sees only what was committed.
    from broker.store.postgres._reader import open_postgres_reader

    with open_postgres_reader(_POSTGRES[tmp_path]) as reader:
        if reader.session(session_id) is None:
            return None
        return [decode_event(row.line) for row in reader.rows(session_id)]


def _postgres_fail(store: EventStore, cause: str, landed: bool) -> None:
    import psycopg

    cast(PostgresStore, store).inject_commit_failure(psycopg.OperationalError(cause), landed=landed)


def _postgres_verify(tmp_path: Path) -> None:
    from broker.store.postgres._reader import open_postgres_reader

    with open_postgres_reader(_POSTGRES[tmp_path]) as reader:
        verify_reader(reader)  # raises on a broken chain, pairing or turn


# ----------------------------------------------------------------------- the table

KINDS: dict[str, StoreKind] = {
    "memory": StoreKind(
        open=_open_memory,
        where=lambda _tmp_path: "memory",
        durable_log=_memory_log,
        fail_next_write=_memory_fail,
        mend_writes=_memory_mend,
        verify=lambda _tmp_path: None,
        texts=Texts(
            closed="memory store is closed: open a new one",
            no_session="memory store holds no session {session!r}",
            out_of_sequence=(
                "session {session!r} submitted events after seq {seq}, but its log ends at seq "
                "{ends}: re-read the head (store.head) before sequencing again"
            ),
            write_failed="{cause}",
        ),
        unable={
            "reopen": "a memory store lives as long as its object: nothing to reopen or recover",
            "landed failure": "a memory store cannot fail a write after storing it",
        },
    ),
    "sqlite": StoreKind(
        open=_open_sqlite,
        where=lambda tmp_path: str(tmp_path / SQLITE_FILE),
        durable_log=_sqlite_log,
        fail_next_write=_sqlite_fail,
        mend_writes=_sqlite_mend,
        verify=_sqlite_verify,
        texts=Texts(
            closed="sqlite store '{where}' is closed: open it again",
            no_session="store file '{where}' holds no session {session!r}",
            out_of_sequence=(
                "session {session!r} submitted events after seq {seq}, but its log in '{where}' "
                "ends at seq {ends} (an earlier write failed): re-read the head (store.head) "
                "before sequencing again"
            ),
            write_failed=(
                "write to store file '{where}' failed: sqlite says {cause!r}; nothing of this "
                "append was stored — free disk space or fix the file, then retry"
            ),
        ),
    ),
    "postgres": StoreKind(
        open=_open_postgres,
        where=lambda tmp_path: _POSTGRES[tmp_path],
        durable_log=_postgres_log,
        fail_next_write=_postgres_fail,
        mend_writes=_sqlite_mend,
        verify=_postgres_verify,
        texts=Texts(
            closed="postgresql store '{where}' is closed: open it again",
            no_session="postgresql store '{where}' holds no session {session!r}",
            out_of_sequence=(
                "session {session!r} submitted events after seq {seq}, but its log in '{where}' "
                "ends at seq {ends} (an earlier write failed): re-read the head (store.head) "
                "before sequencing again"
            ),
            write_failed=(
                "write to postgresql store '{where}' failed: postgresql says {cause!r}; nothing "
                "of this append was stored — check the server and the connection, then retry"
            ),
        ),
    ),
}

# Cases where a store breaks the contract today, by test id: run as strict xfails.
KNOWN_VIOLATIONS: dict[str, str] = {
    "test_every_call_after_close_raises[memory-head]": (
        "MemoryStore.head does not check that the store is open: it answers after aclose"
    ),
    "test_every_call_after_close_raises[memory-read]": (
        "MemoryStore.read does not check that the store is open: it answers after aclose"
    ),
}


@pytest.fixture(params=list(KINDS))
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreKind]:
    violation = KNOWN_VIOLATIONS.get(request.node.name)
    if violation is not None:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=violation))
    if request.param == "postgres":
        # A fresh database for the test (skips, saying why, when no server answers).
        _POSTGRES[tmp_path] = request.getfixturevalue("postgres_dsn")
    yield KINDS[request.param]
    _POSTGRES.pop(tmp_path, None)


# A skip must be raised before the test's trio run: from inside it pytest loses the reason.
@pytest.fixture
def reopenable(kind: StoreKind) -> StoreKind:
    """``kind``, for a test that closes the store and opens it again."""
    kind.require("reopen")
    return kind


@pytest.fixture(params=[False, True], ids=["rolled-back", "landed"])
def write_lands(request: pytest.FixtureRequest, kind: StoreKind) -> bool:
    """Whether the write ``fail_next_write`` fails is stored all the same."""
    landed: bool = request.param
    if landed:
        kind.require("landed failure")
    return landed


# ----------------------------------------------------------------------- helpers

DISK_FULL = "database or disk is full"
IO_ERROR = "disk I/O error"


async def _outcome(
    store: EventStore,
    session_id: str,
    seq: int,
    events: Sequence[Event],
    state: ApprovalState | None = None,
) -> StoreError | None:
    """Submit *events* after *seq* and wait: the :class:`StoreError` that refused them (at
    once, or through their ticket), or None once they are durable. *state* defaults to the
    fold of *events* alone (right for a submission at seq 0)."""
    try:
        ticket = store.submit(session_id, seq, events, fold_all(events) if state is None else state)
    except StoreError as exc:
        await trio.lowlevel.checkpoint()
        return exc
    try:
        await ticket.wait()
    except StoreError as exc:
        return exc
    return None


async def _wait_all(tickets: Sequence[Durability]) -> list[BaseException | None]:
    for ticket in tickets:
        with suppress(StoreError):
            await ticket.wait()
    return [ticket.error for ticket in tickets]


def _grants(*names: str) -> list[Event]:
    return [ApprovalGrant(tool_name=name) for name in names]


def _turn(turn: int, *inside: Event) -> list[Event]:
    """A whole turn: nothing left open for recovery."""
    return [TurnStart(turn=turn), *inside, TurnEnd(turn=turn, reason=TurnEndReason(kind="done"))]


# ----------------------------------------------------------------------- ordering


async def test_events_are_read_back_in_the_order_they_were_appended(
    kind: StoreKind, tmp_path: Path
) -> None:
    first: list[Event] = [
        TurnStart(turn=1),
        ApprovalAsked(id="q1", tool_name="bash", call_id="c1", reason="why"),
    ]
    second: list[Event] = [
        ApprovalDecided(id="q1", outcome=Outcome.ALLOWED_ONCE, remembered=True),
        ApprovalGrant(tool_name="bash"),
    ]
    third: list[Event] = [UserMessage(text="ünïcode ✓ line\u2028separator")]
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            assert await _outcome(store, "s", 0, first) is None
            await store.append("s", second)
            state = fold_all(first + second + third)
            assert await _outcome(store, "s", 4, third, state) is None
            assert await store.read("s") == first + second + third
            assert await store.head("s") == StoreHead(seq=5, state=state)


async def test_pipelined_submissions_land_in_order(kind: StoreKind, tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            assert not store.congested
            # Each follows the last *submitted* seq, none waited for yet.
            logged, tickets = _submit_one_by_one(store, "a", "b", "c", "d")
            assert await _wait_all(tickets) == [None] * 4
            assert await store.read("s") == logged
            assert await store.head("s") == StoreHead(seq=4, state=fold_all(logged))


async def test_append_follows_what_was_submitted_before_it(kind: StoreKind, tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            submitted = store.submit("s", 0, _grants("a"), fold_all(_grants("a")))
            await store.append("s", _grants("b"))
            assert await _wait_all([submitted]) == [None]
            assert await store.read("s") == _grants("a", "b")


async def test_interleaved_sessions_each_keep_their_own_order(
    kind: StoreKind, tmp_path: Path
) -> None:
    sessions, per_session = 16, 12
    with trio.fail_after(20):
        async with kind.open(tmp_path) as store:

            async def writer(session_id: str) -> None:
                await store.create_session(session_id, None)
                logged: list[Event] = []
                for n in range(per_session):
                    batch = _grants(f"{session_id}-{n}")
                    if n % 3:
                        await store.append(session_id, batch)
                    else:
                        state = fold_all(logged + batch)
                        assert await _outcome(store, session_id, n, batch, state) is None
                    logged += batch

            async with trio.open_nursery() as nursery:
                for index in range(sessions):
                    nursery.start_soon(writer, f"s{index}")
            for index in range(sessions):
                expected = _grants(*(f"s{index}-{n}" for n in range(per_session)))
                assert await store.read(f"s{index}") == expected
                assert (await store.head(f"s{index}")).seq == per_session
    kind.verify(tmp_path)


async def test_head_holds_the_state_handed_with_the_last_submission(
    kind: StoreKind, tmp_path: Path
) -> None:
    """The store persists the session's projection as given: it never folds a second time."""
    events: list[Event] = [UserMessage(text="a"), UserMessage(text="b")]
    handed = attrs.evolve(fold_all(events), turn=7)  # a state no fold of these events gives
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            assert await _outcome(store, "s", 0, events, handed) is None
            assert await store.head("s") == StoreHead(seq=2, state=handed)


# ----------------------------------------------------------------------- durability


async def test_a_submission_is_durable_when_its_ticket_resolves(
    kind: StoreKind, tmp_path: Path
) -> None:
    events = _turn(1, ApprovalAsked(id="q", tool_name="bash"))[:2]
    seen: list[list[Event] | None] = []
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            # Durable before create_session returned.
            assert kind.durable_log(store, tmp_path, "s") == []
            ticket = store.submit("s", 0, events, fold_all(events))
            # What the medium holds at the very moment the ticket resolves.
            ticket.add_done_callback(lambda: seen.append(kind.durable_log(store, tmp_path, "s")))
            await ticket.wait()
            assert (ticket.done, ticket.error) == (True, None)
            assert seen == [events]
            await store.append("s", _grants("g"))
            # append returned: acknowledged, so durable.
            assert kind.durable_log(store, tmp_path, "s") == [*events, *_grants("g")]


async def test_what_was_acknowledged_is_there_after_reopen(
    reopenable: StoreKind, tmp_path: Path
) -> None:
    kind = reopenable
    events = _turn(1, ApprovalAsked(id="q", tool_name="bash"))
    events.insert(2, ApprovalDecided(id="q", outcome=Outcome.REJECTED))
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("root", None)
            await store.create_session("child", "root")
            assert await _outcome(store, "child", 0, events[:2]) is None
            await store.append("child", events[2:])
        async with kind.open(tmp_path) as store:
            assert await store.lookup("child") == SessionRecord(
                session_id="child", parent_id="root"
            )
            assert await store.lookup("root") == SessionRecord(session_id="root", parent_id=None)
            assert await store.read("child") == events
            head = StoreHead(seq=len(events), state=fold_all(events))
            assert await store.claim("child") == head
            assert await store.head("child") == head
            assert await store.read("root") == []
    kind.verify(tmp_path)


# ----------------------------------------------------------------------- sequence


@pytest.mark.parametrize("seq", [5, 0], ids=["ahead", "behind"])
async def test_an_out_of_sequence_submission_is_refused_and_takes_nothing(
    kind: StoreKind, tmp_path: Path, seq: int
) -> None:
    first: list[Event] = [UserMessage(text="one")]
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            assert await _outcome(store, "s", 0, first) is None
            error = await _outcome(store, "s", seq, [UserMessage(text="two")], ApprovalState())
            assert isinstance(error, StoreError)
            assert str(error) == kind.text(
                kind.texts.out_of_sequence, tmp_path, session="s", seq=seq, ends=1
            )
            assert await store.read("s") == first
            assert await store.head("s") == StoreHead(seq=1, state=fold_all(first))
            # The session goes on from its head.
            second: list[Event] = [UserMessage(text="three")]
            assert await _outcome(store, "s", 1, second, fold_all(first + second)) is None
            assert await store.read("s") == first + second
    kind.verify(tmp_path)


async def test_an_out_of_sequence_submission_is_refused_at_once(
    kind: StoreKind, tmp_path: Path
) -> None:
    """submit raises, or hands back a ticket already failed: nothing is handed over."""
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", _grants("a"))
            try:
                ticket = store.submit("s", 5, _grants("b"), ApprovalState())
            except StoreError:
                pass
            else:
                assert ticket.done
                assert isinstance(ticket.error, StoreError)
            assert await store.read("s") == _grants("a")


# ----------------------------------------------------------------------- failed writes


async def test_a_failed_write_acknowledges_nothing_and_the_store_goes_on(
    kind: StoreKind, tmp_path: Path
) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.create_session("t", None)
            await store.append("s", _grants("a"))
            kind.fail_next_write(store, DISK_FULL, False)
            error = await _outcome(store, "s", 1, _grants("b"), fold_all(_grants("a", "b")))
            kind.mend_writes(store)
            assert isinstance(error, StoreError)
            assert str(error) == kind.text(kind.texts.write_failed, tmp_path, cause=DISK_FULL)
            assert await store.read("s") == _grants("a")
            assert kind.durable_log(store, tmp_path, "s") == _grants("a")
            assert await store.head("s") == StoreHead(seq=1, state=fold_all(_grants("a")))
            # Other sessions and later writes are not affected.
            await store.append("t", _grants("x"))
            assert await _outcome(store, "s", 1, _grants("c"), fold_all(_grants("a", "c"))) is None
            assert await store.read("s") == _grants("a", "c")
            assert await store.read("t") == _grants("x")
    kind.verify(tmp_path)


async def test_what_was_sequenced_on_a_failed_write_fails_with_it(
    kind: StoreKind, tmp_path: Path
) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", _grants("a"))
            tickets: list[Durability | StoreError] = []

            def submit(seq: int, name: str) -> None:
                try:
                    tickets.append(store.submit("s", seq, _grants(name), ApprovalState()))
                except StoreError as exc:
                    tickets.append(exc)

            kind.fail_next_write(store, DISK_FULL, False)
            submit(1, "b")
            kind.mend_writes(store)
            submit(2, "c")  # sequenced on top of b, which will not land
            for ticket in tickets:
                if not isinstance(ticket, StoreError):
                    with pytest.raises(StoreError):
                        await ticket.wait()
            assert await store.read("s") == _grants("a")
            assert (await store.head("s")).seq == 1
    kind.verify(tmp_path)


async def test_head_after_a_failed_write_is_what_the_log_holds(
    kind: StoreKind, tmp_path: Path, write_lands: bool
) -> None:
    """After a write reported failed, the head (re-read) is where its owner sequences again:
    with the failed events when they landed all the same (an I/O error reported after the data
    was written), without them when not; a submission on the other assumption is refused."""
    landed = write_lands
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", _grants("a"))
            kind.fail_next_write(store, IO_ERROR, landed)
            with pytest.raises(StoreError, match=re.escape(IO_ERROR)):
                await store.append("s", _grants("b"))
            kind.mend_writes(store)
            logged = _grants("a", "b") if landed else _grants("a")
            head = await store.head("s")
            assert head == StoreHead(seq=len(logged), state=fold_all(logged))
            assert await store.read("s") == logged
            wrong = 1 if landed else 2
            assert isinstance(await _outcome(store, "s", wrong, _grants("x")), StoreError)
            later = [*logged, *_grants("c")]
            assert await _outcome(store, "s", head.seq, _grants("c"), fold_all(later)) is None
            await store.append("s", _grants("d"))
            assert await store.read("s") == [*later, *_grants("d")]
            assert (await store.head("s")).seq == len(later) + 1
    kind.verify(tmp_path)


# ----------------------------------------------------------------------- claim and release


async def test_claim_returns_the_head_and_release_gives_it_back(
    kind: StoreKind, tmp_path: Path
) -> None:
    events = _turn(1, *_grants("a"))
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("empty", None)
            await store.create_session("s", None)
            await store.append("s", events)
            head = StoreHead(seq=3, state=fold_all(events))
            assert await store.claim("s") == head
            await store.release("s")
            assert await store.claim("s") == head  # again, after release
            assert await store.claim("empty") == StoreHead()
            await store.release("empty")
            await store.release("nobody")  # never raises
            assert await store.read("s") == events


async def test_release_lands_the_writes_submitted_before_it(
    kind: StoreKind, tmp_path: Path
) -> None:
    """A session's owner closes it: what it submitted is written before the store lets the
    session go (a shared store gives up its lease only after that)."""
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            logged, tickets = _submit_one_by_one(store, "a", "b", "c")
            await store.release("s")
            assert [(ticket.done, ticket.error) for ticket in tickets] == [(True, None)] * 3
            assert kind.durable_log(store, tmp_path, "s") == logged
    kind.verify(tmp_path)


async def test_a_session_claimed_again_continues_its_log(kind: StoreKind, tmp_path: Path) -> None:
    first = _turn(1, *_grants("a"))
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", first)
            await store.release("s")
            head = await store.claim("s")
            assert head == StoreHead(seq=3, state=fold_all(first))
            second = _turn(2, *_grants("b"))
            assert await _outcome(store, "s", head.seq, second, fold_all([*first, *second])) is None
            assert await store.read("s") == [*first, *second]
            assert await store.head("s") == StoreHead(seq=6, state=fold_all([*first, *second]))
    kind.verify(tmp_path)


async def test_claim_of_a_session_the_store_does_not_hold_is_refused(
    kind: StoreKind, tmp_path: Path
) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            message = kind.text(kind.texts.no_session, tmp_path, session="nobody")
            with pytest.raises(StoreError, match=rf"^{re.escape(message)}$"):
                await store.claim("nobody")
            assert await store.lookup("nobody") is None


# ----------------------------------------------------------------------- read and lookup


async def test_read_head_and_lookup_of_known_and_unknown_sessions(
    kind: StoreKind, tmp_path: Path
) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("root", None)
            await store.create_session("child", "root")
            await store.append("child", _grants("a"))
            assert await store.lookup("root") == SessionRecord(session_id="root", parent_id=None)
            assert await store.lookup("child") == SessionRecord(
                session_id="child", parent_id="root"
            )
            assert await store.lookup("nobody") is None
            assert await store.read("root") == []
            assert await store.read("child") == _grants("a")
            assert await store.read("nobody") == []
            assert await store.head("root") == StoreHead()
            assert await store.head("nobody") == StoreHead()


# ----------------------------------------------------------------------- crash tails


async def test_claim_after_a_crash_closes_the_tail_once(
    reopenable: StoreKind, tmp_path: Path
) -> None:
    """A log left with questions pending and a turn open (a writer that stopped mid-turn; a
    clean close leaves the same log) is closed when the session is next claimed: each pending
    question ``cancelled`` with ``recovered: true``, in the order asked, then the turn
    ``interrupted``. Never granted, never re-asked; a finished session is left as it is."""
    kind = reopenable
    crashed: list[Event] = [
        TurnStart(turn=1),
        ApprovalAsked(id="q1", tool_name="bash"),
        ApprovalDecided(id="q1", outcome=Outcome.ALLOWED_ONCE),
        ApprovalAsked(id="q3", tool_name="bash"),
        ApprovalAsked(id="q2", tool_name="edit"),
    ]
    finished = _turn(1, *_grants("a"))
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.create_session("t", None)
            assert await _outcome(store, "s", 0, crashed) is None
            await store.append("t", finished)
        recovered = [
            *crashed,
            ApprovalDecided(id="q3", outcome=Outcome.CANCELLED, recovered=True),
            ApprovalDecided(id="q2", outcome=Outcome.CANCELLED, recovered=True),
            TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")),
        ]
        head = StoreHead(seq=len(recovered), state=fold_all(recovered))
        assert not head.state.turn_open
        assert head.state.pending == frozenset()
        for _ in range(2):  # the second time there is nothing left to recover
            async with kind.open(tmp_path) as store:
                assert await store.claim("s") == head
                assert await store.read("s") == recovered
                assert await store.claim("t") == StoreHead(seq=3, state=fold_all(finished))
                assert await store.read("t") == finished
                await store.release("s")
    kind.verify(tmp_path)


async def test_a_crash_tail_left_by_a_failed_decision_is_closed_inside_its_turn(
    reopenable: StoreKind, tmp_path: Path
) -> None:
    """The decided write failed; a turn cannot end while its question is pending, so the turn
    is still open when the writer stops: the claim closes the question, then the turn."""
    kind = reopenable
    asked: list[Event] = [TurnStart(turn=1), ApprovalAsked(id="q", tool_name="bash")]
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", asked)
            kind.fail_next_write(store, IO_ERROR, False)
            with pytest.raises(StoreError, match=re.escape(IO_ERROR)):
                await store.append("s", [ApprovalDecided(id="q", outcome=Outcome.REJECTED)])
            kind.mend_writes(store)
        async with kind.open(tmp_path) as store:
            head = await store.claim("s")
            events = await store.read("s")
    assert events == [
        *asked,
        ApprovalDecided(id="q", outcome=Outcome.CANCELLED, recovered=True),
        TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")),
    ]
    assert head == StoreHead(seq=4, state=fold_all(events))
    kind.verify(tmp_path)


# ----------------------------------------------------------------------- close


def _submit_one_by_one(store: EventStore, *names: str) -> tuple[list[Event], list[Durability]]:
    """Submit a grant per name to the empty session "s", none waited for: the log they make
    and their tickets."""
    logged: list[Event] = []
    tickets: list[Durability] = []
    for name in names:
        batch = _grants(name)
        tickets.append(store.submit("s", len(logged), batch, fold_all(logged + batch)))
        logged += batch
    return logged, tickets


async def test_aclose_writes_what_was_submitted_first(kind: StoreKind, tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            logged, tickets = _submit_one_by_one(store, "a", "b", "c")
            await store.aclose()
            assert [(ticket.done, ticket.error) for ticket in tickets] == [(True, None)] * 3
            assert kind.durable_log(store, tmp_path, "s") == logged
    kind.verify(tmp_path)


async def _submit_after_close(store: EventStore) -> object:
    return store.submit("s", 1, _grants("b"), ApprovalState())  # raises at once


CALLS_AFTER_CLOSE: dict[str, Callable[[EventStore], Awaitable[object]]] = {
    "create_session": lambda store: store.create_session("t", None),
    "claim": lambda store: store.claim("s"),
    "head": lambda store: store.head("s"),
    "read": lambda store: store.read("s"),
    "lookup": lambda store: store.lookup("s"),
    "append": lambda store: store.append("s", _grants("b")),
    "submit": _submit_after_close,
}


@pytest.mark.parametrize("call", list(CALLS_AFTER_CLOSE))
async def test_every_call_after_close_raises(kind: StoreKind, tmp_path: Path, call: str) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            await store.append("s", _grants("a"))
            await store.aclose()
            message = kind.text(kind.texts.closed, tmp_path)
            with pytest.raises(StoreError, match=rf"^{re.escape(message)}$"):
                await CALLS_AFTER_CLOSE[call](store)
            await store.release("s")  # release never raises
            assert kind.durable_log(store, tmp_path, "s") == _grants("a")


async def test_aclose_when_cancelled_still_closes(kind: StoreKind, tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            await store.create_session("s", None)
            logged, tickets = _submit_one_by_one(store, "a", "b", "c")
            with trio.CancelScope() as scope:
                scope.cancel(reason="test: the closer is cancelled")
                await store.aclose()
            assert [(ticket.done, ticket.error) for ticket in tickets] == [(True, None)] * 3
            message = kind.text(kind.texts.closed, tmp_path)
            with pytest.raises(StoreError, match=rf"^{re.escape(message)}$"):
                store.submit("s", 3, _grants("d"), ApprovalState())
        if "reopen" not in kind.unable:
            # What it held is released: the store opens again, with every acknowledged event.
            async with kind.open(tmp_path) as store:
                assert await store.read("s") == logged
    kind.verify(tmp_path)


async def test_a_store_with_nothing_queued_has_room(kind: StoreKind, tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with kind.open(tmp_path) as store:
            assert not store.congested
            await store.wait_for_room()
