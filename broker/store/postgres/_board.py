"""The answer board of a PostgreSQL store: in the store's schema, shared by every host on it.

Synopsis::

    board = PostgresBoard(dsn="postgresql://broker@db/broker")     # any process, any host
    await board.answer(question_id, Outcome.REJECTED, by="alice")

Two tables in the store's schema (``board_questions``, ``board_answers``; created on first use
with ``IF NOT EXISTS``, in a transaction, beside the store's own tables) and one notification
channel. An answer is one statement: stored only if the question is on the board, unanswered
and not decided in the log, and ``pg_notify``-ed with the whole answer as its payload, so the
asking process needs no query to learn it. Two hosts answering at once meet on the answers
table's key: the second stores nothing and is refused naming the first.

Waiting (:meth:`PostgresBoard.wait_answer`): one task of the asking process (whichever waits
first) serves the board's ``LISTEN`` connection (kept open between questions), waits on its
socket with
:func:`trio.lowlevel.wait_readable` (no thread, no asyncio), and hands each notified answer to
its waiter. It also polls the answers of every waiting question — when it starts listening,
every ``poll_interval`` seconds, and after a lost connection (then it reconnects with bounded
backoff) — so an answer whose notification was lost is still found. Nothing runs while nothing
waits.

The session log is the only record of how a question settled: a question is settled once its
``approval/decided`` is in the log (whatever decided it — an answer from here, a local answerer,
an abort, a deadline, or the recovery that closed a dead owner's crash tail), so
:meth:`PostgresBoard.retire` has nothing to write and nothing can disagree with the audit.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import psycopg
import trio
from psycopg import sql

from ..._codec import converter, register_wire_type, utf8_encodable
from ..._vocabulary import Outcome
from .._protocol import StoreError
from .._requests import wall_clock_ms
from .._url import redact_dsn
from ..board import (
    AnswerGiven,
    AnswerRefusedError,
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
from ._native import Prepared, encode_params

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["PostgresBoard"]

T = TypeVar("T")

register_wire_type(PendingQuestion)

# Grants revoked from elsewhere (broker grants revoke); the first revocation stands.
_REVOCATIONS_DDL = """CREATE TABLE IF NOT EXISTS {s}.board_revocations (
        grant_id text PRIMARY KEY,
        revoked_by text,
        revoked_ms bigint NOT NULL
    )"""
_DDL = (
    """CREATE TABLE IF NOT EXISTS {s}.board_questions (
        id text PRIMARY KEY,
        session_id text NOT NULL,
        asked_ms bigint NOT NULL,
        question text NOT NULL
    )""",
    # Boards made before after_seq existed get the column; their rows keep NULL (see _AFTER).
    "ALTER TABLE {s}.board_questions ADD COLUMN IF NOT EXISTS after_seq bigint",
    """CREATE TABLE IF NOT EXISTS {s}.board_answers (
        question_id text PRIMARY KEY,
        outcome text NOT NULL,
        answered_by text,
        answered_ms bigint NOT NULL,
        always boolean NOT NULL DEFAULT false
    )""",
    # Boards made before answers had terms (always for 30m, for the project) get the column;
    # their rows keep NULL: a plain always.
    "ALTER TABLE {s}.board_answers ADD COLUMN IF NOT EXISTS always_how text",
    "ALTER TABLE {s}.board_answers ADD COLUMN IF NOT EXISTS message text",
    # People who may answer (broker people add): a name, groups, their token's hash.
    """CREATE TABLE IF NOT EXISTS {s}.board_people (
        name text PRIMARY KEY,
        groups text NOT NULL,
        token_hash text NOT NULL UNIQUE,
        added_ms bigint NOT NULL
    )""",
    _REVOCATIONS_DDL,
    # Every answer given to a question (deciding, counted towards a quorum, or refused), in
    # the order given (ord): who, how they were authenticated, why refused.
    """CREATE TABLE IF NOT EXISTS {s}.board_given (
        ord bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        question_id text NOT NULL,
        at_ms bigint NOT NULL,
        outcome text NOT NULL,
        given_by text,
        how text,
        refused text
    )""",
    "CREATE INDEX IF NOT EXISTS board_given_question ON {s}.board_given (question_id)",
)
# Which events of a question's session may hold its decided: those after the seq its log had
# reached when the question was put up (an index range of the events' key, a few rows however
# long the session), or for a row put up by an older broker (after_seq NULL) those written since
# it was put up (a minute of clock slack; the asker writes both stamps, with one clock) — a scan
# of the whole session, which cost an answer 0.5-0.8 ms at 1,200 events.
_AFTER = (
    "e.session_id = q.session_id AND e.seq > coalesce(q.after_seq, 0) "
    "AND (q.after_seq IS NOT NULL OR e.ts_ms >= q.asked_ms - 60000) "
)
#: A question, its answer and the outcome the log decided it as, in one round trip. Only the
#: events :data:`_AFTER` allows that contain the question's id are parsed as JSON.
_STATUS = (
    "SELECT q.question, a.question_id, a.outcome, a.answered_by, a.answered_ms, a.always, "
    "a.always_how, a.message, "
    "(SELECT e.line::jsonb->'data'->>'outcome' FROM {s}.events e "
    f"WHERE {_AFTER}"
    "AND strpos(e.line, q.id) > 0 "
    "AND e.line::jsonb->>'type' = 'approval/decided' "
    "AND e.line::jsonb->'data'->>'id' = q.id LIMIT 1) "
    "FROM {s}.board_questions q LEFT JOIN {s}.board_answers a ON a.question_id = q.id "
    "WHERE q.id = %s"
)
#: Store an answer (and notify the asker) iff the question is on the board, unanswered and not
#: decided in the log; no row back means nothing was stored. Run by :mod:`._native` (libpq
#: placeholders): $1 id, $2 always, $3 outcome, $4 answered by, $5 answered at, $6 channel,
#: $7 payload, $8 the answer's terms (:meth:`RemoteAnswer.how`), $9 its message.
_ANSWER = (
    "WITH open AS (SELECT q.id FROM {s}.board_questions q WHERE q.id = $1 "
    "AND NOT EXISTS (SELECT 1 FROM {s}.board_answers a WHERE a.question_id = q.id) "
    f"AND NOT EXISTS (SELECT 1 FROM {{s}}.events e WHERE {_AFTER}"
    "AND strpos(e.line, q.id) > 0 "
    "AND e.line::jsonb->>'type' = 'approval/decided' "
    "AND e.line::jsonb->'data'->>'id' = q.id) "
    "AND (NOT $2::boolean OR (q.question::jsonb->>'offersAlways')::boolean IS TRUE) "
    "AND ($8::text IS DISTINCT FROM 'project' "
    "OR q.question::jsonb->>'projectRules' IS NOT NULL)), "
    "stored AS (INSERT INTO {s}.board_answers (question_id, outcome, answered_by, answered_ms, "
    "always, always_how, message) SELECT id, $3::text, $4::text, $5::bigint, $2::boolean, "
    "$8::text, $9::text "
    "FROM open "
    "ON CONFLICT (question_id) DO NOTHING RETURNING question_id) "
    "SELECT pg_notify($6::text, $7::text) FROM stored"
)
_DECIDED_ANYWHERE = (
    "SELECT line::jsonb->'data'->>'outcome', line::jsonb->'data'->>'answeredBy', ts_ms "
    "FROM {s}.events "
    "WHERE line::jsonb->>'type' = 'approval/decided' AND line::jsonb->'data'->>'id' = %s"
)
#: The longest pause between reconnection attempts of the listener.
_MAX_BACKOFF = 2.0
#: How many answers nobody waits for yet are kept (see PostgresBoard._recent).
_RECENT = 1024


def _table_exists(conn: Connection[Any], schema: str, name: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s)", (f"{schema}.{name}",)).fetchone()
    return row is not None and row[0] is not None


def _column_exists(conn: Connection[Any], schema: str, table: str, column: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "AND column_name = %s",
        (schema, table, column),
    ).fetchone()
    return row is not None


def _person(row: tuple[Any, ...]) -> Person:
    name, groups, digest, added_ms = row
    return Person(
        name=str(name), groups=tuple(json.loads(groups)), token_hash=str(digest),
        added_ms=int(added_ms),
    )  # fmt: skip


def _answer_from(row: tuple[Any, ...] | list[Any]) -> RemoteAnswer:
    # Five fields from a broker before answers had terms (a notification's payload), six
    # before they had messages, else seven.
    question_id, outcome, by, at_ms, always, *rest = row
    how = rest[0] if rest and isinstance(rest[0], str) else None
    message = rest[1] if len(rest) > 1 and isinstance(rest[1], str) else None
    return RemoteAnswer(
        question_id=str(question_id),
        outcome=Outcome(outcome),
        by=by,
        answered_at_ms=int(at_ms),
        always=bool(always),
        message=message,
        **answer_terms(how),
    )


@attrs.define(eq=False)
class PostgresBoard:
    """An :class:`~broker.store._board.AnswerBoard` in the PostgreSQL store at *dsn*, schema
    *schema* (module doc). Queries run on a worker thread over one connection of the board's,
    one at a time; the listener waits on its socket in the trio thread."""

    dsn: str
    schema: str = "broker"
    poll_interval: float = 1.0
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)
    _conn: Connection[Any] | None = attrs.field(default=None, init=False)
    _ensured: bool = attrs.field(default=False, init=False)
    _waiting: dict[str, trio.Event] = attrs.field(factory=dict, init=False)
    _answers: dict[str, RemoteAnswer] = attrs.field(factory=dict, init=False)
    _listening: bool = attrs.field(default=False, init=False)
    # The LISTEN connection, kept between waits (a new one would cost a connect per question,
    # and a notification sent meanwhile would be missed); closed by aclose() or when lost.
    _listener: Connection[Any] | None = attrs.field(default=None, init=False)
    # Answers notified for questions nobody waits on yet (published, not yet waited for), the
    # newest _RECENT of them.
    _recent: collections.OrderedDict[str, RemoteAnswer] = attrs.field(
        factory=collections.OrderedDict, init=False
    )
    # The answer statement, prepared on the board's query connection (made on first use).
    _answer_statement: Prepared | None = attrs.field(default=None, init=False)

    @property
    def channel(self) -> str:
        """The notification channel of this store's board."""
        return f"broker_board_{self.schema}"

    def _q(self, statement: str) -> sql.Composed:
        return sql.SQL(statement).format(s=sql.Identifier(self.schema))

    def _connect(self, *, autocommit: bool, name: str) -> Connection[Any]:
        try:
            # UTF8: the answer statement's parameters go as UTF-8 text (._native).
            return psycopg.connect(
                self.dsn,
                autocommit=autocommit,
                connect_timeout=10,
                application_name=name,
                client_encoding="UTF8",
            )
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to the answer board of postgresql store "
                f"'{redact_dsn(self.dsn)}': {str(exc).strip().splitlines()[0]}; check the URL, "
                "the server and the credentials"
            ) from exc

    async def _run(self, fn: Callable[[Connection[Any]], T]) -> T:
        async with self._lock:
            return await self._run_unlocked(fn)

    async def _run_unlocked(self, fn: Callable[[Connection[Any]], T]) -> T:
        def call() -> T:
            if self._conn is None or self._conn.closed:
                # Autocommit: every operation is one statement (the answer's CTE included), so
                # each is its own transaction and costs one round trip.
                self._conn = self._connect(autocommit=True, name="broker-board")
            conn = self._conn
            try:
                return fn(conn)
            except psycopg.OperationalError as exc:
                conn.close()
                self._conn = None
                raise self._lost(exc) from exc

        # Not abandoned on cancellation: a write either completes or never started.
        return await trio.to_thread.run_sync(call)

    def _lost(self, exc: Exception) -> StoreError:
        return StoreError(
            f"the answer board of postgresql store '{redact_dsn(self.dsn)}' lost its "
            f"connection: {str(exc).strip().splitlines()[0]}; retry"
        )

    def _ensure(self, conn: Connection[Any]) -> None:
        if not self._ensured:
            # Two brokers creating the tables at once would collide in the catalog: serialize.
            with conn.transaction():
                conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"broker-board:{self.schema}",)
                )
                for statement in _DDL:
                    conn.execute(self._q(statement))
            self._ensured = True

    def _has_board(self, conn: Connection[Any]) -> bool:
        if not self._ensured and _table_exists(conn, self.schema, "board_answers"):
            # Every part added since the first board (a question's after_seq, an answer's terms
            # and message, the people): all there, or made by an older broker, which the
            # idempotent DDL brings up to date, once.
            current = (
                _column_exists(conn, self.schema, "board_questions", "after_seq")
                and _column_exists(conn, self.schema, "board_answers", "always_how")
                and _column_exists(conn, self.schema, "board_answers", "message")
                and _table_exists(conn, self.schema, "board_people")
                and _table_exists(conn, self.schema, "board_given")
            )
            if current:
                self._ensured = True
            else:
                self._ensure(conn)
        return self._ensured

    def _status(self, conn: Connection[Any], question_id: str) -> QuestionStatus | None:
        row = None
        if self._has_board(conn):
            row = conn.execute(self._q(_STATUS), (question_id,)).fetchone()
        if row is None:
            if not _table_exists(conn, self.schema, "events"):
                return None
            decided = conn.execute(self._q(_DECIDED_ANYWHERE), (question_id,)).fetchone()
            if decided is None:
                return None
            # Pruned once decided, or decided without being put up here: settled, from the log.
            return settled_from_log(question_id, *decided)
        text, answered_id, outcome, by, at_ms, always, how, message, decided_as = row
        question = converter.structure(json.loads(text), PendingQuestion)
        answer = (
            _answer_from((answered_id, outcome, by, at_ms, always, how, message))
            if answered_id is not None
            else None
        )
        settled = Outcome(decided_as) if decided_as is not None else None
        return QuestionStatus(question=question, answer=answer, settled=settled)

    async def publish(self, question: PendingQuestion, *, after_seq: int | None = None) -> None:
        """Put *question* up with *after_seq* (:class:`~broker.store.AnswerBoard`); committed on
        return. Cancellation: waits for the write."""
        text = json.dumps(converter.unstructure(question), separators=(",", ":"))

        def write(conn: Connection[Any]) -> None:
            self._ensure(conn)
            conn.execute(
                self._q(
                    "INSERT INTO {s}.board_questions (id, session_id, asked_ms, question, "
                    "after_seq) VALUES (%s, %s, %s, %s, %s)"
                ),
                (question.id, question.session_id, question.asked_at_ms, text, after_seq),
            )

        await self._run(write)

    # -- people (broker.store._people) -----------------------------------------------------------

    async def add_person(self, person: Person) -> None:
        """Register *person* for every host on this database (:class:`PeopleExistsError` if
        the name is taken). Cancellation: waits for the transaction."""

        def write(conn: Connection[Any]) -> None:
            if not self._has_board(conn):
                self._ensure(conn)
            try:
                with conn.transaction():
                    conn.execute(
                        self._q(
                            "INSERT INTO {s}.board_people (name, groups, token_hash, added_ms) "
                            "VALUES (%s, %s, %s, %s)"
                        ),
                        (person.name, json.dumps(person.groups), person.token_hash,
                         person.added_ms),
                    )  # fmt: skip
            except psycopg.errors.UniqueViolation:
                raise PeopleExistsError(
                    f"{person.name!r} is registered already: broker people remove "
                    f"{person.name} first, to give them a new token"
                ) from None

        await self._run(write)

    async def remove_person(self, name: str) -> bool:
        """Remove *name*, for every host at once. Cancellation: waits for the transaction."""

        def write(conn: Connection[Any]) -> bool:
            if not self._has_board(conn):
                return False
            with conn.transaction():
                cursor = conn.execute(
                    self._q("DELETE FROM {s}.board_people WHERE name = %s"), (name,)
                )
            return cursor.rowcount > 0

        return await self._run(write)

    async def people(self) -> list[Person]:
        """Everyone registered, by name. Cancellation: waits for the read."""

        def read(conn: Connection[Any]) -> list[Person]:
            if not self._has_board(conn):
                return []
            rows = conn.execute(
                self._q(
                    "SELECT name, groups, token_hash, added_ms FROM {s}.board_people ORDER BY name"
                )
            ).fetchall()
            return [_person(row) for row in rows]

        return await self._run(read)

    async def identify(self, token: str) -> Person | None:
        """The person whose token *token* is, or None. Cancellation: waits for the read."""
        digest = token_hash(token)

        def read(conn: Connection[Any]) -> Person | None:
            if not self._has_board(conn):
                return None
            row = conn.execute(
                self._q(
                    "SELECT name, groups, token_hash, added_ms FROM {s}.board_people "
                    "WHERE token_hash = %s"
                ),
                (digest,),
            ).fetchone()
            return None if row is None else _person(row)

        return await self._run(read)

    async def give(self, given: AnswerGiven) -> None:
        """Record an answer given (module doc of :mod:`broker.store.board._quorum`); committed
        on return. Cancellation: waits for the write."""

        def write(conn: Connection[Any]) -> None:
            self._ensure(conn)
            conn.execute(
                self._q(
                    "INSERT INTO {s}.board_given (question_id, at_ms, outcome, given_by, how, "
                    "refused) VALUES (%s, %s, %s, %s, %s, %s)"
                ),
                given.row(),
            )

        await self._run(write)

    async def given(self, question_id: str) -> list[AnswerGiven]:
        """The answers given, oldest first. Cancellation: waits for the read."""

        def read(conn: Connection[Any]) -> list[AnswerGiven]:
            if not self._has_board(conn):
                return []
            rows = conn.execute(
                self._q(
                    "SELECT at_ms, outcome, given_by, how, refused FROM {s}.board_given "
                    "WHERE question_id = %s ORDER BY ord"
                ),
                (question_id,),
            ).fetchall()
            return AnswerGiven.rows(question_id, rows)

        return await self._run(read)

    async def revoke_grant(self, grant_id: str, by: str | None) -> GrantRevocation:
        """Record the revocation, atomically (the first stands), for every host on this
        database. Cancellation: waits for the transaction."""
        check_grant_id(grant_id)
        check_by(by)
        if by is not None and "\x00" in by:
            raise ValueError(
                "by must not contain a NUL character (PostgreSQL text cannot hold one): pass "
                "the name without it"
            )

        def write(conn: Connection[Any]) -> GrantRevocation:
            if not _table_exists(conn, self.schema, "board_revocations"):
                # A board made by an older broker: add the table, serialized like _ensure.
                with conn.transaction():
                    conn.execute(
                        "SELECT pg_advisory_xact_lock(hashtext(%s))",
                        (f"broker-board:{self.schema}",),
                    )
                    conn.execute(self._q(_REVOCATIONS_DDL))
            with conn.transaction():
                conn.execute(
                    self._q(
                        "INSERT INTO {s}.board_revocations (grant_id, revoked_by, revoked_ms) "
                        "VALUES (%s, %s, %s) ON CONFLICT (grant_id) DO NOTHING"
                    ),
                    (grant_id, by, wall_clock_ms()),
                )
            found = self._revocation(conn, grant_id)
            assert found is not None
            return found

        return await self._run(write)

    async def grant_revocation(self, grant_id: str) -> GrantRevocation | None:
        """The recorded revocation. Cancellation: waits for the read."""
        if "\x00" in grant_id or not utf8_encodable(grant_id):
            await trio.lowlevel.checkpoint()
            return None  # no grant's id holds one (PostgreSQL text cannot)
        return await self._run(lambda conn: self._revocation(conn, grant_id))

    def _revocation(self, conn: Connection[Any], grant_id: str) -> GrantRevocation | None:
        if not _table_exists(conn, self.schema, "board_revocations"):
            return None
        row = conn.execute(
            self._q("SELECT revoked_by, revoked_ms FROM {s}.board_revocations WHERE grant_id = %s"),
            (grant_id,),
        ).fetchone()
        if row is None:
            return None
        return GrantRevocation(grant_id=grant_id, by=row[0], revoked_at_ms=int(row[1]))

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
        """Give the first answer, atomically, and notify the asker (module doc).
        Cancellation: waits for the transaction."""
        value = check_answer(outcome, by)
        lasts_ms = remember_terms(always, always_for, project)
        check_message(message)
        if always and value is not Outcome.ALLOWED_ONCE:
            raise ValueError(
                "always must only be given with allowed-once: always-allow remembers an allow"
            )

        if "\x00" in question_id or not utf8_encodable(question_id):
            # No question's id holds a NUL or a lone surrogate (PostgreSQL text cannot): unknown,
            # refused by name.
            unknown = refusal(question_id, None)
            assert unknown is not None
            raise unknown
        if by is not None and "\x00" in by:
            raise ValueError(
                "by must not contain a NUL character (PostgreSQL text cannot hold one): pass "
                "the name without it"
            )
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
        how = answer.how()
        payload = json.dumps(
            [question_id, value.value, by, answer.answered_at_ms, always, how, message]
        )
        params = encode_params(
            [
                question_id,
                always,
                value.value,
                by,
                answer.answered_at_ms,
                self.channel,
                payload,
                how,
                message,
            ]
        )
        async with self._lock:
            if not self._ensured or self._conn is None or self._conn.closed:
                await self._run_unlocked(self._has_board)  # connects; is there a board?
            conn = self._conn
            # The usual case in one statement, from this thread (no hand-off to a worker):
            # stored (and notified) only if the question is on the board, unanswered and
            # undecided; a concurrent answer loses on the key.
            stored = self._ensured and conn is not None and await self._answer_native(conn, params)
        if stored:
            return answer

        def refuse(conn: Connection[Any]) -> RemoteAnswer:
            status = self._status(conn, question_id)
            refused = refusal(question_id, status)
            if refused is None and status is not None:
                check_always(status.question, value, always, project)  # the other reasons
            # Not stored and not refusable: answered and decided in between; say so.
            raise refused or AnswerRefusedError(
                f"question {question_id!r} was answered or settled meanwhile: retry to see "
                "what was recorded"
            )

        return await self._run(refuse)

    async def _answer_native(self, conn: Connection[Any], params: list[bytes | None]) -> bool:
        """Run :data:`_ANSWER` with *params* (the caller holds the lock); whether it stored."""
        if self._answer_statement is None:
            self._answer_statement = Prepared(
                name=b"broker_board_answer", text=self._q(_ANSWER).as_bytes(conn)
            )
        try:
            result = await self._answer_statement.run(conn, params)
        except psycopg.OperationalError as exc:
            self._conn = None  # Prepared.run closed it
            raise self._lost(exc) from exc
        return result.ntuples > 0

    async def aclose(self) -> None:
        """Close the board's connections (queries and LISTEN); a later use reconnects.
        Cancellation: waits for the close (a quick message to the server)."""

        def close() -> None:
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()
            listener, self._listener = self._listener, None
            if listener is not None:
                listener.close()

        async with self._lock:
            await trio.to_thread.run_sync(close)

    async def status(self, question_id: str) -> QuestionStatus | None:
        """Where the question stands. Cancellation: nothing changes."""
        return await self._run(lambda conn: self._status(conn, question_id))

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        """The questions put up whose decision is not in the log yet, oldest first.

        Questions the log has decided are pruned from the board on the way (the log keeps
        their record, and a late answer is still refused naming it), so the board holds what
        waits, not its history. Cancellation: waits for the statements.
        """

        def read(conn: Connection[Any]) -> list[PendingQuestion]:
            if not self._has_board(conn):
                return []
            scope, parameters = (
                ("", ())
                if session_id is None
                else (
                    " AND q.session_id = %s",
                    (session_id,),
                )
            )
            decided = (
                f"EXISTS (SELECT 1 FROM {{s}}.events e WHERE {_AFTER}"
                "AND strpos(e.line, q.id) > 0 "
                "AND e.line::jsonb->>'type' = 'approval/decided' "
                "AND e.line::jsonb->'data'->>'id' = q.id)"
            )
            # One statement: the settled leave (answers with them), the rest are returned.
            rows = conn.execute(
                self._q(
                    "WITH gone AS (DELETE FROM {s}.board_questions q WHERE "
                    + decided
                    + scope
                    + " RETURNING q.id), gone_answers AS (DELETE FROM {s}.board_answers a "
                    "USING gone WHERE a.question_id = gone.id), gone_given AS (DELETE FROM "
                    "{s}.board_given g USING gone WHERE g.question_id = gone.id) "
                    "SELECT q.question FROM {s}.board_questions q WHERE NOT "
                    + decided
                    + scope
                    + " ORDER BY q.asked_ms, q.id"
                ),
                parameters * 2,
            )
            return [converter.structure(json.loads(text), PendingQuestion) for (text,) in rows]

        return await self._run(read)

    async def wait_answer(self, question_id: str) -> RemoteAnswer:
        """Wait for the first answer (module doc). Cancellation: stops waiting; another
        waiting task takes over the listening."""
        if question_id in self._waiting:
            raise ValueError(
                f"question {question_id!r} is waited for already: wait once per question"
            )
        event = self._waiting[question_id] = trio.Event()
        early = self._recent.pop(question_id, None)
        if early is not None:
            self._deliver(early)
        await trio.lowlevel.checkpoint()
        try:
            while question_id not in self._answers:
                if self._listening:
                    with trio.move_on_after(self.poll_interval):
                        await event.wait()
                    continue
                self._listening = True
                try:
                    await self._listen_until(event)
                finally:
                    self._listening = False
            return self._answers[question_id]
        finally:
            del self._waiting[question_id]
            self._answers.pop(question_id, None)

    def _deliver(self, answer: RemoteAnswer) -> None:
        waiter = self._waiting.get(answer.question_id)
        if waiter is None:
            self._recent[answer.question_id] = answer
            while len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            return
        self._answers[answer.question_id] = answer
        waiter.set()

    async def _listen_until(self, done: trio.Event) -> None:
        """Serve the listener until *done* is set; (re)connects it when missing or lost."""
        backoff = 0.05
        # Whatever was answered while nobody listened for these questions.
        await self._poll()
        while not done.is_set():
            listener = self._listener
            if listener is None or listener.closed:
                try:
                    listener = await trio.to_thread.run_sync(self._open_listener)
                except StoreError:
                    with trio.move_on_after(backoff):
                        await done.wait()
                    backoff = min(backoff * 2, _MAX_BACKOFF)
                    continue
                self._listener = listener
                backoff = 0.05
                await self._poll()  # answers given while the connection was down
            try:
                await self._serve_listener(listener, done)
            except (psycopg.OperationalError, StoreError, OSError):
                listener.close()  # lost: reconnect, poll again
                self._listener = None

    def _open_listener(self) -> Connection[Any]:
        conn = self._connect(autocommit=True, name="broker-board-listener")
        try:
            conn.execute(sql.SQL("LISTEN {c}").format(c=sql.Identifier(self.channel)))
        except BaseException:
            conn.close()
            raise
        return conn

    async def _serve_listener(self, conn: Connection[Any], done: trio.Event) -> None:
        await trio.lowlevel.checkpoint()
        pgconn = conn.pgconn
        while not done.is_set():
            with trio.move_on_after(self.poll_interval) as idle:
                await trio.lowlevel.wait_readable(pgconn.socket)
            if idle.cancelled_caught:
                await self._poll()  # the fallback: a notification may have been lost
                continue
            pgconn.consume_input()  # raises OperationalError on a lost connection
            while (notify := pgconn.notifies()) is not None:
                try:
                    fields = json.loads(notify.extra)
                    if not isinstance(fields, list) or len(fields) not in (5, 6, 7):
                        raise ValueError(notify.extra)
                    self._deliver(_answer_from(fields))
                except (ValueError, TypeError):
                    await self._poll()  # not ours, or malformed: ask the table instead

    async def _poll(self) -> None:
        ids = [qid for qid in self._waiting if qid not in self._answers]
        if not ids:
            await trio.lowlevel.checkpoint()
            return

        def read(conn: Connection[Any]) -> list[RemoteAnswer]:
            if not self._has_board(conn):
                return []
            rows = conn.execute(
                self._q(
                    "SELECT question_id, outcome, answered_by, answered_ms, always, always_how, "
                    "message FROM {s}.board_answers WHERE question_id = ANY(%s)"
                ),
                (ids,),
            )
            return [_answer_from(row) for row in rows]

        for answer in await self._run(read):
            self._deliver(answer)
