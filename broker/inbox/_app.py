"""The inbox as an ASGI application: the page, its live stream, and the answering POST.

Routes (every one needs the token first — 401 and no data without it, :mod:`._auth`):

========================  ================================================================
``GET /``                 the page; ``/?token=…`` sets the cookie and redirects to ``/``
``GET /inbox.js|css``     the page's script and style
``GET /events``           Server-Sent Events: ``snapshot`` then ``change`` events (:mod:`._feed`)
``GET /api/pending``      the pending questions now, as one JSON ``snapshot``
``GET /api/session?id=``  a session's log, asked/decided paired (:mod:`._timeline`; SQLite)
``POST /api/answer``      ``{"id", "outcome": "allowed-once"|"rejected", "by", "always"?,
                          "alwaysFor"? (seconds), "project"?, "message"?}`` with the
                          ``X-CSRF-Token`` header (403 without it, nothing recorded); 200 the
                          answer was taken, 409 refused naming what was recorded, 404 an unknown
                          id, 400 a bad body
``GET /api/grants``       the grants of the store's sessions, with their status
``GET /stats``            ``broker stats --html`` of the store (:mod:`broker.stats`): charts
``POST /api/revoke``      ``{"id", "by"}`` with the ``X-CSRF-Token`` header: the grant is revoked
                          for every process on the store (200), 404 no such grant, 400 a bad body
========================  ================================================================

A tiny hand-written ASGI app rather than a framework (decision 0019): seven routes, and the
stream's lifetime, its bound and its cancellation are written here in trio terms.

Containment: a :class:`~broker.store.StoreError` while answering becomes a 503 naming it;
anything else propagates to the server, which answers 500 and logs it.
"""

from __future__ import annotations

import hmac
import json
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import trio

from .._cattrs_errors import STRUCTURE_ERRORS, problems
from .._codec import converter
from .._display import printable
from ..stats import CSP as STATS_CSP
from ..store import (
    TOKEN_PREFIX,
    AnswerRefusedError,
    LogToolError,
    NotAnApproverError,
    PendingQuestion,
    Person,
    StoreError,
    UnknownQuestionError,
    answer_question,
    approvals_of,
    check_answer,
    check_by,
    check_grant_id,
)
from ._feed import Feed, FeedBusyError
from ._http import (
    BodyTooLargeError,
    Receive,
    Request,
    Send,
    read_body,
    respond,
    start_response,
)
from ._page import ASSETS, asset, page_html
from ._wire import (
    AnswerBody,
    AnswerReply,
    GrantsView,
    GrantView,
    RevokeBody,
    Snapshot,
    dumps,
    shown,
    shown_name,
)

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from ..store import AnswerBoard, GrantRow
    from ._auth import InboxKeys
    from ._timeline import SessionLog

__all__ = ["InboxApp"]

T = TypeVar("T")
B = TypeVar("B", AnswerBody, RevokeBody)

_JSON = "application/json"
_UNAUTHORIZED = (
    b"unauthorized: open the address broker inbox printed (it ends in ?token=...), or send "
    b"the token as 'Authorization: Bearer TOKEN'\n"
)


def _problem(status: int, error: str, question_id: str | None = None) -> tuple[int, bytes]:
    return status, dumps(AnswerReply(id=question_id, error=error))


@attrs.frozen
class Visitor:
    """Who a request comes from: *person* signed in with their own token, or (None) the holder
    of the shared token; *arrived* when the request itself carried the person's token."""

    person: Person | None = None
    arrived: bool = False

    def may_answer(self, question: PendingQuestion) -> bool:
        """Whether this visitor may see and answer *question* (its approvers, if named)."""
        if self.person is None:
            return not question.approvers
        return question.may_be_answered_by(self.person.name, self.person.groups)


@attrs.define(eq=False)
class InboxApp:
    """The ASGI app over *board*, guarded by *keys*, streaming *feed*, showing session views
    from *log* (module doc)."""

    board: AnswerBoard
    keys: InboxKeys
    feed: Feed
    #: Where session views are read from; None: the store has no reader here (404).
    log: SessionLog | None = None
    #: Seconds between two keep-alive comments on an idle stream (a dead client shows then).
    heartbeat: float = 15.0
    #: The longest answering POST body taken.
    max_body: int = 8192

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope. Cancellation: the request is cut short."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            # No WebSocket here: refuse the handshake.
            await send({"type": "websocket.close", "code": 1008})
            return
        request = Request.from_scope(scope)
        try:
            who = await self._signed_in(request)
        except StoreError as exc:
            await respond(send, 503, dumps(AnswerReply(error=str(exc))), _JSON)
            return
        if who is None:
            await respond(send, 401, _UNAUTHORIZED, extra=((b"www-authenticate", b"Bearer"),))
            return
        await self._route(request, receive, send, who)

    async def _signed_in(self, request: Request) -> Visitor | None:
        """Who makes *request*: a person (their own token, in the request or signed in by
        cookie: read from the board each time, so a removed person is out at once), the
        holder of the shared token, or None."""
        given = self.keys.given_token(request)
        if given is not None and given.startswith(TOKEN_PREFIX):
            person = await self.board.identify(given)
            return None if person is None else Visitor(person=person, arrived=True)
        claimed = self.keys.signed_in_as(request)
        if claimed is not None:
            name, mac = claimed
            for person in await self.board.people():
                if person.name == name and hmac.compare_digest(
                    self.keys.person_cookie(person.name, person.token_hash).encode(),
                    f"{name}.{mac}".encode(),
                ):
                    return Visitor(person=person)
            return None
        await trio.lowlevel.checkpoint()
        return Visitor() if self.keys.authorized(request) else None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, request: Request, receive: Receive, send: Send, who: Visitor) -> None:
        method, path = request.method, request.path
        if path in ("/api/answer", "/api/revoke"):
            if method != "POST":
                await respond(send, 405, b"use POST\n", extra=((b"allow", b"POST"),))
                return
            posted = self._answer if path == "/api/answer" else self._revoke
            status, body = await posted(request, receive, who)
            await respond(send, status, body, _JSON)
            return
        if method not in ("GET", "HEAD"):
            await respond(send, 405, b"use GET\n", extra=((b"allow", b"GET"),))
            return
        if path == "/":
            first = who.arrived and self.keys.given_token(request) is not None
            if first or self.keys.query_token_ok(request):
                # The first visit: the cookie from now on, and the token out of the address bar.
                cookie = (
                    self.keys.set_person_cookie(who.person.name, who.person.token_hash)
                    if who.person is not None
                    else self.keys.set_cookie()
                ).encode()
                await respond(send, 303, b"", extra=((b"set-cookie", cookie), (b"location", b"/")))
                return
            name = who.person.name if who.person is not None else None
            await respond(send, 200, page_html(self.keys.csrf, name), "text/html; charset=utf-8")
        elif path in ASSETS:
            name, content_type = ASSETS[path]
            await respond(send, 200, asset(name), content_type)
        elif path == "/events":
            await self._events(receive, send, who)
        elif path == "/api/pending":
            await self._pending(send, who)
        elif path == "/api/session":
            status, body = await self._session(request)
            await respond(send, status, body, _JSON)
        elif path == "/api/grants":
            status, body = await self._grants()
            await respond(send, status, body, _JSON)
        elif path == "/stats":
            await self._stats(send)
        else:
            await respond(send, 404, b"not found\n")

    async def _pending(self, send: Send, who: Visitor) -> None:
        try:
            questions = [q for q in await self.board.pending() if who.may_answer(q)]
            questions = [
                attrs.evolve(q, approvals=approvals_of(await self.board.given(q.id)))
                if q.quorum > 1
                else q
                for q in questions
            ]
        except StoreError as exc:
            await respond(send, 503, dumps(AnswerReply(error=str(exc))), _JSON)
            return
        limited = [shown(q) for q in questions[: self.feed.limit]]
        body = dumps(Snapshot(questions=limited, total=len(questions), now_ms=_now_ms()))
        await respond(send, 200, body, _JSON)

    async def _session(self, request: Request) -> tuple[int, bytes]:
        await trio.lowlevel.checkpoint()
        session_id = urllib.parse.parse_qs(request.query).get("id", [""])[0]
        if self.log is None:
            return _problem(
                404,
                "no session view here: the inbox reads session logs from a SQLite or PostgreSQL "
                "store",
            )
        if not session_id:
            return _problem(400, "id is required: /api/session?id=SESSION_ID")
        try:
            return 200, await self.log.view(session_id)
        except LogToolError as exc:
            return _problem(404, shown_name(str(exc)))
        except StoreError as exc:
            return _problem(503, str(exc))

    async def _grants(self) -> tuple[int, bytes]:
        await trio.lowlevel.checkpoint()
        if self.log is None:
            return _problem(
                404, "no grants view here: the inbox reads grants from a SQLite or PostgreSQL store"
            )
        try:
            rows = await self.log.grants()
            views = [await self._grant_view(row) for row in rows]
        except (LogToolError, StoreError) as exc:
            return _problem(503, shown_name(str(exc)))
        return 200, dumps(GrantsView(grants=views))

    async def _stats(self, send: Send) -> None:
        """``broker stats --html`` of this inbox's store, served with the page's own
        Content-Security-Policy (its inline style; nothing loads, nothing runs)."""
        if self.log is None:
            await respond(
                send,
                404,
                b"no statistics here: the inbox reads them from a SQLite or PostgreSQL store\n",
            )
            return
        try:
            page = await self.log.stats_page()
        except (LogToolError, StoreError) as exc:
            await respond(send, 503, shown_name(str(exc)).encode() + b"\n")
            return
        csp = ((b"content-security-policy", STATS_CSP.encode()),)
        await respond(send, 200, page, "text/html; charset=utf-8", extra=csp)

    async def _grant_view(self, row: GrantRow) -> GrantView:
        await trio.lowlevel.checkpoint()
        status = row.status if row.revoked_by is None else f"{row.status} by {row.revoked_by}"
        if row.status == "active" and row.id.startswith("g-"):
            revocation = await self.board.grant_revocation(row.id)
            if revocation is not None:
                by = f" by {revocation.by}" if revocation.by else ""
                status = f"revoked{by}"
            elif row.expires_at_ms is not None and row.expires_at_ms <= _now_ms():
                status = "expired"
        return GrantView(
            id=printable(row.id),
            session_id=printable(row.session_id),
            tool_name=printable(row.tool_name),
            command=None if row.command is None else printable(row.command),
            by=None if row.by is None else printable(row.by),
            at_ms=row.at_ms,
            expires_at_ms=row.expires_at_ms,
            status=printable(status),
        )

    async def _revoke(self, request: Request, receive: Receive, who: Visitor) -> tuple[int, bytes]:
        checked = await self._posted(request, receive, RevokeBody, "id, by")
        if isinstance(checked, tuple):
            return checked
        body = await self._as(who, checked)
        if isinstance(body, tuple):
            return body
        try:
            check_grant_id(body.id)
            check_by(body.by)
        except ValueError as exc:
            return _problem(400, shown_name(str(exc)))
        if self.log is not None:
            try:
                known = {row.id for row in await self.log.grants()}
            except (LogToolError, StoreError) as exc:
                return _problem(503, shown_name(str(exc)))
            if body.id not in known:
                return _problem(404, f"no grant {body.id} in this store: reload the page")
        try:
            revocation = await self.board.revoke_grant(body.id, body.by)
        except StoreError as exc:
            return _problem(503, str(exc))
        reply = AnswerReply(id=revocation.grant_id, outcome="revoked", by=revocation.by)
        return 200, dumps(reply)

    async def _posted(
        self, request: Request, receive: Receive, kind: type[T], fields: str
    ) -> T | tuple[int, bytes]:
        """A POST's JSON body as *kind*, or the problem to answer (CSRF first: a forged POST
        changes nothing and its body is not even read)."""
        await trio.lowlevel.checkpoint()
        if not self.keys.csrf_ok(request):
            return _problem(
                403,
                "csrf token missing or wrong: send the X-CSRF-Token the page was served with "
                "(reload the page)",
            )
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        if content_type != _JSON:
            return _problem(415, "content-type must be application/json: send the answer as JSON")
        try:
            raw = await read_body(receive, self.max_body)
        except BodyTooLargeError:
            return _problem(413, f"body must be at most {self.max_body} bytes: send {fields}")
        try:
            return converter.structure(json.loads(raw), kind)
        except (json.JSONDecodeError, UnicodeDecodeError):
            quoted = ", ".join(f'"{f}"' for f in fields.split(", "))
            return _problem(400, f"body must be JSON: {{{quoted}}}")
        except STRUCTURE_ERRORS as exc:
            return _problem(400, "body: " + "; ".join(problems(exc)))

    async def _as(self, who: Visitor, body: B) -> B | tuple[int, bytes]:
        """*body* as *who* may send it: a person's own name replaces whatever ``by`` says; the
        shared token's ``by`` is taken only on a store with no people (403 otherwise).
        Cancellation: a read of the board, nothing changes."""
        if who.person is not None:
            await trio.lowlevel.checkpoint()
            return attrs.evolve(body, by=who.person.name)  # a forged by is ignored
        if await self.board.people():
            return _problem(
                403,
                "this store has registered people: sign in with your own token (open the "
                "inbox at /?token=YOUR_TOKEN, from broker people add); the shared token "
                "answers only where no one is registered",
            )
        return body

    async def _answer(self, request: Request, receive: Receive, who: Visitor) -> tuple[int, bytes]:
        checked = await self._posted(request, receive, AnswerBody, "id, outcome, by")
        if isinstance(checked, tuple):
            return checked
        body = await self._as(who, checked)
        if isinstance(body, tuple):
            return body
        try:
            outcome = check_answer(body.outcome, body.by)
        except ValueError as exc:
            return _problem(400, str(exc), body.id)
        how = "shared-token" if who.person is None else "token" if who.arrived else "inbox-session"
        try:
            given = await answer_question(
                self.board,
                body.id,
                outcome,
                body.by,
                how=how,
                always=body.always,
                always_for=body.always_for,
                project=body.project,
                message=body.message,
            )
        except UnknownQuestionError as exc:
            return _problem(404, shown_name(str(exc)), body.id)
        except NotAnApproverError as exc:
            return _problem(403, shown_name(str(exc)), body.id)
        except ValueError as exc:  # always-allow where not offered, or bad terms
            return _problem(400, shown_name(str(exc)), body.id)
        except AnswerRefusedError as exc:
            recorded = exc.recorded.value if exc.recorded is not None else None
            by = shown_name(exc.answered_by) if exc.answered_by is not None else None
            reply = AnswerReply(id=body.id, error=shown_name(str(exc)), recorded=recorded, by=by)
            return 409, dumps(reply)
        except StoreError as exc:
            return _problem(503, str(exc), body.id)
        answer = given.decided
        if answer is None:
            reply = AnswerReply(
                id=body.id,
                by=shown_name(body.by) if body.by is not None else None,
                approvals=[shown_name(a) for a in given.approvals],
                quorum=given.quorum,
            )
            return 200, dumps(reply)
        reply = AnswerReply(id=answer.question_id, outcome=answer.outcome.value, by=answer.by)
        return 200, dumps(reply)

    async def _events(self, receive: Receive, send: Send, who: Visitor) -> None:
        async with trio.open_nursery() as nursery:
            try:
                async with self.feed.subscribe(nursery.cancel_scope) as (first, changes):
                    await start_response(send, 200, "text/event-stream; charset=utf-8")
                    nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
                    with trio.CancelScope() as streaming:
                        async with trio.open_nursery() as watching:
                            if who.person is not None:
                                watching.start_soon(self._end_when_removed, who.person, streaming)
                            await self._stream(send, first, changes)
                            watching.cancel_scope.cancel()
                    # The feed dropped this page, or the person was removed (or given a new
                    # token): end the response. The browser reconnects; a removed person's
                    # reconnect is refused (401).
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except FeedBusyError as exc:
                await respond(send, 503, str(exc).encode() + b"\n")
            nursery.cancel_scope.cancel(reason="broker inbox: the stream ended")

    async def _stream(
        self, send: Send, first: bytes, changes: trio.MemoryReceiveChannel[bytes]
    ) -> None:
        """Send the snapshot, then each change and a keep-alive when idle; return when the
        feed drops this page (its queue closed)."""
        # retry: how soon the browser reconnects after a dropped stream (ms).
        await _chunk(send, b"retry: 1000\n\n" + first)
        while True:
            with trio.move_on_after(self.heartbeat):
                try:
                    message = await changes.receive()
                except trio.EndOfChannel:
                    return
                await _chunk(send, message)
                continue
            await _chunk(send, b": keep-alive\n\n")

    async def _end_when_removed(self, person: Person, streaming: trio.CancelScope) -> None:
        """Cancel *streaming* once *person* is no longer on the board with the token they
        signed in with (removed, or given a new token by another process), checked every
        poll interval. A board that cannot be read keeps the stream: the next check decides."""
        while True:
            await trio.sleep(self.feed.interval)
            try:
                people = await self.board.people()
            except StoreError:
                continue
            if not any(p.name == person.name and p.token_hash == person.token_hash for p in people):
                streaming.cancel(reason="broker inbox: the person was removed")
                return


async def _chunk(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _until_disconnect(receive: Receive, stream: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    stream.cancel(reason="broker inbox: the page went away")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
