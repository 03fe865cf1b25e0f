"""The answer board of an SQLite store: in the store's own file, shared by every process on it.

Synopsis::

    board = SqliteBoard(path="/var/lib/agent/log.sqlite")      # any process of this host
    await board.answer(question_id, Outcome.REJECTED, by="alice")

Two tables beside the event log, created by the store's writer when it opens the file
(:data:`._schema.BOARD_DDL`; a store file made before the board gains them without a new
schema version): ``board_questions`` (each question put up, as JSON) and ``board_answers``
(the first answer of each). An answer is taken inside ``BEGIN IMMEDIATE``: two processes
answering at once serialize on the file's write lock, and the second sees the first and is
refused naming it.

The session log is the only record of how a question settled: a question is settled once its
``approval/decided`` is in the log (whatever decided it, the recovery of a dead owner's crash
tail included), so :meth:`SqliteBoard.retire` has nothing to write; an id the board never saw
but the log decided is refused naming that outcome.

Waiting (:meth:`SqliteBoard.wait_answer`) polls: one query for every question this process
waits on, every ``poll_interval`` seconds, run by one of the waiting tasks (the others wait on
their own event); nothing runs while nothing waits. Each operation opens its own short-lived
connection on a worker thread, so the board owns nothing that needs closing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import TypeVar

import attrs
import trio

from ..._codec import converter, register_wire_type
from ..._vocabulary import Outcome
from .._protocol import StoreError
from .._requests import wall_clock_ms
from ..board import (
    AnswerGiven,
    GrantRevocation,
    PendingQuestion,
    PeopleExistsError,
    Person,
    QuestionStatus,
    RemoteAnswer,
    answer_terms,
    check_always,
    check_answer,
    check_by,
    check_grant_id,
    check_message,
    refusal,
    remember_terms,
    settled_from_log,
    token_hash,
)
from ._schema import PEOPLE_DDL, connect_reader, schema_version
from ._walk import DECIDED_SINCE_SQL

__all__ = ["SqliteBoard"]

T = TypeVar("T")

register_wire_type(PendingQuestion)

#: The log's decision of a question, by id (the log is authoritative over the board), in a
#: file of schema version 1 (a reader does not migrate it; ._walk's DECIDED_SINCE_SQL for 2).
#: Only the session's events written since the question was put up (a minute of clock slack;
#: the asking process writes both stamps, with one clock) that contain the id are parsed.
_DECIDED_IN_SESSION_V1 = (
    "SELECT json_extract(line, '$.data.outcome') FROM events WHERE session_id = ?1 "
    "AND ts_ms >= ?2 - 60000 AND instr(line, ?3) > 0 "
    "AND json_extract(line, '$.type') = 'approval/decided' "
    "AND json_extract(line, '$.data.id') = ?3"
)
_DECIDED_ANYWHERE = (
    "SELECT json_extract(line, '$.data.outcome'), json_extract(line, '$.data.answeredBy'), "
    "ts_ms FROM events "
    "WHERE json_extract(line, '$.type') = 'approval/decided' "
    "AND json_extract(line, '$.data.id') = ?"
)
#: How many ids one poll asks about (SQLite's default limit on parameters is 32766).
_POLL_CHUNK = 500


def _decided_query(conn: sqlite3.Connection) -> str:
    """The query of the log's decision of a question in its session (``?1`` the session,
    ``?2`` when it was asked, ``?3`` its id), for *conn*'s schema version: read once per use
    of a connection, not once per question."""
    return DECIDED_SINCE_SQL if schema_version(conn) >= 2 else _DECIDED_IN_SESSION_V1


def _decided_in_session(
    conn: sqlite3.Connection, query: str, session_id: str, asked_ms: int, question_id: str
) -> tuple[str] | None:
    """The outcome the log decided *question_id* with, asked in *session_id* at *asked_ms*
    (*query*: :func:`_decided_query`'s)."""
    row: tuple[str] | None = conn.execute(query, (session_id, asked_ms, question_id)).fetchone()
    return row


def _has_board(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, "board_answers")


def _person(row: tuple[str, str, str, int]) -> Person:
    name, groups, digest, added_ms = row
    return Person(name=name, groups=tuple(json.loads(groups)), token_hash=digest, added_ms=added_ms)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def _revocation(conn: sqlite3.Connection, grant_id: str) -> GrantRevocation | None:
    if not _has_table(conn, "board_revocations"):
        return None
    row = conn.execute(
        "SELECT revoked_by, revoked_ms FROM board_revocations WHERE grant_id = ?", (grant_id,)
    ).fetchone()
    if row is None:
        return None
    return GrantRevocation(grant_id=grant_id, by=row[0], revoked_at_ms=row[1])


def _question_from(text: str) -> PendingQuestion:
    return converter.structure(json.loads(text), PendingQuestion)


def _answer_from(
    row: tuple[str, str, str | None, int, int, str | None, str | None],
) -> RemoteAnswer:
    question_id, outcome, by, at_ms, always, how, message = row
    return RemoteAnswer(
        question_id=question_id,
        outcome=Outcome(outcome),
        by=by,
        answered_at_ms=at_ms,
        always=bool(always),
        message=message,
        **answer_terms(how),
    )


def _status(conn: sqlite3.Connection, question_id: str) -> QuestionStatus | None:
    """The question's status: its board row and answer, settled as the log decided it."""
    row = None
    if _has_board(conn):
        row = conn.execute(
            "SELECT question FROM board_questions WHERE id = ?", (question_id,)
        ).fetchone()
    if row is None:
        decided = conn.execute(_DECIDED_ANYWHERE, (question_id,)).fetchone()
        if decided is None:
            return None
        # Pruned once decided, or decided without being put up here: settled, from the log.
        return settled_from_log(question_id, *decided)
    question = _question_from(row[0])
    decided = _decided_in_session(
        conn, _decided_query(conn), question.session_id, question.asked_at_ms, question_id
    )
    answer_row = conn.execute(
        "SELECT question_id, outcome, answered_by, answered_ms, always, always_how, message "
        "FROM board_answers WHERE question_id = ?",
        (question_id,),
    ).fetchone()
    return QuestionStatus(
        question=question,
        answer=_answer_from(answer_row) if answer_row is not None else None,
        settled=Outcome(decided[0]) if decided is not None else None,
    )


def _prune(conn: sqlite3.Connection, ids: list[tuple[str]]) -> None:
    """Drop the board rows of questions the log has decided; best effort (a reader that may
    not write the file, or a busy one, leaves them for the next time)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("DELETE FROM board_answers WHERE question_id = ?", ids)
        if _has_table(conn, "board_given"):
            conn.executemany("DELETE FROM board_given WHERE question_id = ?", ids)
        conn.executemany("DELETE FROM board_questions WHERE id = ?", ids)
        conn.execute("COMMIT")
    except sqlite3.OperationalError:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


@attrs.define(eq=False)
class SqliteBoard:
    """An :class:`~broker.store._board.AnswerBoard` in the SQLite store file *path* (module
    doc). Every method runs its SQL on a worker thread, one operation at a time per board."""

    path: str
    poll_interval: float = 0.025
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _checked: bool = attrs.field(default=False, init=False)
    _waiting: dict[str, trio.Event] = attrs.field(factory=dict, init=False)
    _answers: dict[str, RemoteAnswer] = attrs.field(factory=dict, init=False)
    _polling: bool = attrs.field(default=False, init=False)

    def _connect(self) -> sqlite3.Connection:
        if not self._checked:
            # Refuses a missing file or one that is not a broker store, changing nothing.
            connect_reader(self.path).close()
            self._checked = True
        return sqlite3.connect(self.path, timeout=10.0, isolation_level=None)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            conn = self._connect()
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                raise StoreError(
                    f"answer board in store file '{self.path}' failed: sqlite says {exc}"
                ) from exc
            finally:
                conn.close()

        async with self._lock:
            # Not abandoned on cancellation: a write either completes or never started.
            return await trio.to_thread.run_sync(call)

    async def publish(self, question: PendingQuestion, *, after_seq: int | None = None) -> None:
        """Put *question* up; durable on return (*after_seq* is not used: SQLite's board reads
        the log by time). Cancellation: waits for the write."""
        text = json.dumps(converter.unstructure(question), separators=(",", ":"))

        def write(conn: sqlite3.Connection) -> None:
            if not _has_board(conn):
                raise StoreError(
                    f"store file '{self.path}' has no answer board: it is opened by an older "
                    "broker; open it with this version to answer from elsewhere"
                )
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "INSERT INTO board_questions (id, session_id, asked_ms, question) "
                    "VALUES (?, ?, ?, ?)",
                    (question.id, question.session_id, question.asked_at_ms, text),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run(write)

    async def retire(self, question_id: str, outcome: Outcome) -> None:
        """Nothing to write: the session log records how the question settled, and the board
        reads it from there (module doc). Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()

    async def answer(
        self,
        question_id: str,
        outcome: Outcome,
        by: str | None,
        *,
        always: bool = False,
        always_for: float | None = None,
        project: bool = False,
        message: str | None = None,
    ) -> RemoteAnswer:
        """Give the first answer, atomically (module doc). Cancellation: waits for the write."""
        value = check_answer(outcome, by)
        lasts_ms = remember_terms(always, always_for, project)
        check_message(message)

        def write(conn: sqlite3.Connection) -> RemoteAnswer:
            conn.execute("BEGIN IMMEDIATE")
            try:
                status = _status(conn, question_id)
                refused = refusal(question_id, status)
                if refused is not None:
                    raise refused
                assert status is not None
                check_always(status.question, value, always, project)
                answer = RemoteAnswer(
                    question_id=question_id,
                    outcome=value,
                    by=by,
                    answered_at_ms=wall_clock_ms(),
                    always=always,
                    always_for_ms=lasts_ms,
                    project=project,
                    message=message,
                )
                conn.execute(
                    "INSERT INTO board_answers (question_id, outcome, answered_by, answered_ms, "
                    "always, always_how, message) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        question_id,
                        value.value,
                        by,
                        answer.answered_at_ms,
                        int(always),
                        answer.how(),
                        message,
                    ),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return answer

        return await self._run(write)

    async def give(self, given: AnswerGiven) -> None:
        """Record an answer given (module doc of :mod:`broker.store.board._quorum`).
        Cancellation: waits for the write."""

        def write(conn: sqlite3.Connection) -> None:
            if not _has_table(conn, "board_given"):
                raise StoreError(
                    f"store file '{self.path}' cannot record answers given: its writer is an "
                    "older broker; open the store with this version"
                )
            conn.execute(
                "INSERT INTO board_given (question_id, at_ms, outcome, given_by, how, refused) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                given.row(),
            )

        await self._run(write)

    async def given(self, question_id: str) -> list[AnswerGiven]:
        """The answers given, oldest first. Cancellation: waits for the read."""

        def read(conn: sqlite3.Connection) -> list[AnswerGiven]:
            if not _has_table(conn, "board_given"):
                return []
            rows = conn.execute(
                "SELECT at_ms, outcome, given_by, how, refused FROM board_given "
                "WHERE question_id = ? ORDER BY rowid",
                (question_id,),
            ).fetchall()
            return AnswerGiven.rows(question_id, rows)

        return await self._run(read)

    async def revoke_grant(self, grant_id: str, by: str | None) -> GrantRevocation:
        """Record the revocation, atomically (the first stands). Cancellation: waits for the
        write."""
        check_grant_id(grant_id)
        check_by(by)

        def write(conn: sqlite3.Connection) -> GrantRevocation:
            if not _has_table(conn, "board_revocations"):
                raise StoreError(
                    f"store file '{self.path}' has no table for revoked grants yet: it is made "
                    "when a broker of this version opens the store; open it once, then retry"
                )
            conn.execute(
                "INSERT OR IGNORE INTO board_revocations (grant_id, revoked_by, revoked_ms) "
                "VALUES (?, ?, ?)",
                (grant_id, by, wall_clock_ms()),
            )
            found = _revocation(conn, grant_id)
            assert found is not None
            return found

        return await self._run(write)

    async def grant_revocation(self, grant_id: str) -> GrantRevocation | None:
        """The recorded revocation. Cancellation: waits for the read."""
        return await self._run(lambda conn: _revocation(conn, grant_id))

    # -- people (broker.store._people) -----------------------------------------------------------

    async def add_person(self, person: Person) -> None:
        """Register *person* (:class:`PeopleExistsError` if the name is taken). Cancellation:
        waits for the write."""

        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(PEOPLE_DDL)
                try:
                    conn.execute(
                        "INSERT INTO board_people (name, groups, token_hash, added_ms) "
                        "VALUES (?, ?, ?, ?)",
                        (
                            person.name,
                            json.dumps(person.groups),
                            person.token_hash,
                            person.added_ms,
                        ),
                    )
                except sqlite3.IntegrityError:
                    raise PeopleExistsError(
                        f"{person.name!r} is registered already: broker people remove "
                        f"{person.name} first, to give them a new token"
                    ) from None
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        await self._run(write)

    async def remove_person(self, name: str) -> bool:
        """Remove *name*: their token stops working at once. Cancellation: waits for the
        write."""

        def write(conn: sqlite3.Connection) -> bool:
            if not _has_table(conn, "board_people"):
                return False
            return conn.execute("DELETE FROM board_people WHERE name = ?", (name,)).rowcount > 0

        return await self._run(write)

    async def people(self) -> list[Person]:
        """Everyone registered, by name. Cancellation: waits for the read."""

        def read(conn: sqlite3.Connection) -> list[Person]:
            if not _has_table(conn, "board_people"):
                return []
            rows = conn.execute(
                "SELECT name, groups, token_hash, added_ms FROM board_people ORDER BY name"
            )
            return [_person(row) for row in rows]

        return await self._run(read)

    async def identify(self, token: str) -> Person | None:
        """The person whose token *token* is, or None. Cancellation: waits for the read."""
        digest = token_hash(token)

        def read(conn: sqlite3.Connection) -> Person | None:
            if not _has_table(conn, "board_people"):
                return None
            row = conn.execute(
                "SELECT name, groups, token_hash, added_ms FROM board_people WHERE token_hash = ?",
                (digest,),
            ).fetchone()
            return None if row is None else _person(row)

        return await self._run(read)

    async def aclose(self) -> None:
        """Nothing to close: the board holds no connection. Cancellation: a plain checkpoint."""
        await trio.lowlevel.checkpoint()

    async def status(self, question_id: str) -> QuestionStatus | None:
        """Where the question stands (module doc). Cancellation: nothing changes."""
        return await self._run(lambda conn: _status(conn, question_id))

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        """The questions put up whose decision is not in the log yet, oldest first.

        Questions the log has decided are pruned from the board on the way (the log keeps
        their record, and a late answer is still refused naming it), so the board holds what
        waits, not its history. Cancellation: waits for the read (and the pruning).
        """

        def read(conn: sqlite3.Connection) -> list[PendingQuestion]:
            if not _has_board(conn):
                return []
            query = "SELECT question FROM board_questions"
            parameters: tuple[str, ...] = ()
            if session_id is not None:
                query += " WHERE session_id = ?"
                parameters = (session_id,)
            found, settled = [], []
            decided_query = _decided_query(conn)
            for (text,) in conn.execute(query + " ORDER BY asked_ms, id", parameters).fetchall():
                question = _question_from(text)
                decided = _decided_in_session(
                    conn, decided_query, question.session_id, question.asked_at_ms, question.id
                )
                if decided is None:
                    found.append(question)
                else:
                    settled.append((question.id,))
            if settled:
                _prune(conn, settled)
            return found

        return await self._run(read)

    async def wait_answer(self, question_id: str) -> RemoteAnswer:
        """Wait for the first answer, polling while anything waits (module doc).

        Cancellation: stops waiting; another waiting task takes over the polling.
        """
        if question_id in self._waiting:
            raise ValueError(
                f"question {question_id!r} is waited for already: wait once per question"
            )
        event = self._waiting[question_id] = trio.Event()
        await trio.lowlevel.checkpoint()
        try:
            while question_id not in self._answers:
                if self._polling:
                    # Another task polls; wake at least once an interval to take over if it left.
                    with trio.move_on_after(self.poll_interval * 2):
                        await event.wait()
                    continue
                self._polling = True
                try:
                    while question_id not in self._answers:
                        await self._poll()
                        with trio.move_on_after(self.poll_interval):
                            await event.wait()
                finally:
                    self._polling = False
            return self._answers[question_id]
        finally:
            del self._waiting[question_id]
            self._answers.pop(question_id, None)

    async def _poll(self) -> None:
        ids = [qid for qid in self._waiting if qid not in self._answers]

        def read(conn: sqlite3.Connection) -> list[RemoteAnswer]:
            if not _has_board(conn):
                return []
            found = []
            for start in range(0, len(ids), _POLL_CHUNK):
                chunk = ids[start : start + _POLL_CHUNK]
                marks = ",".join("?" * len(chunk))
                found += [
                    _answer_from(row)
                    for row in conn.execute(
                        "SELECT question_id, outcome, answered_by, answered_ms, always, "
                        "always_how, message "
                        f"FROM board_answers WHERE question_id IN ({marks})",
                        chunk,
                    )
                ]
            return found

        if not ids:
            await trio.lowlevel.checkpoint()
            return
        for answer in await self._run(read):
            self._answers[answer.question_id] = answer
            waiter = self._waiting.get(answer.question_id)
            if waiter is not None:
                waiter.set()
