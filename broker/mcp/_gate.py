"""The MCP gate: a transparent stdio relay that holds every ``tools/call`` until the broker
says ``allowed-once``.

Synopsis::

    async with open_broker(store="log.sqlite") as broker:
        process = await trio.lowlevel.open_process(["npx", "server"], stdin=PIPE, stdout=PIPE)
        await relay(
            broker,
            client_in=stdin, client_out=stdout,                       # the MCP client
            upstream_in=process.stdout, upstream_out=process.stdin,   # the MCP server
            rules=GateRules(allow=["read_*"]),
        )

Every line passes through as the bytes received, in both directions, except:

* a ``tools/call`` request from the client is held and becomes a question of the connection's
  broker session (one session and one turn per connection). ``allowed-once`` forwards it;
  any other outcome answers the client with a tool result ``isError: true`` naming the
  outcome, and the server never sees the call. The call is forwarded re-encoded by the gate
  (compact JSON), so the arguments shown in the question are a byte-exact part of what the
  server receives. A ``tools/call`` sent as a notification, spelled loosely
  (``Tools/Call``), in a batch, or with a bad id or params is never forwarded;
* a client's ``notifications/cancelled`` for a held call withdraws its question (settles
  ``cancelled``; no response, as the MCP spec says for a cancelled request);
* the gate's own requests to the client (``elicitation/create``, when the client advertised
  elicitation in ``initialize``) and their responses, which never reach the server; on the
  stateless 2026-07-28 revision the question is an input-required result instead (when the
  call's envelope advertises elicitation), and the client's retry of the call, carrying the
  gate's ``requestState`` and the answer, takes the call's place: it must repeat the call
  asked about, and it is forwarded as the original call (the server never sees the gate's
  ``inputResponses``);
* what the gate refuses: lines over the size limit, bad JSON, duplicated keys, batches,
  responses to ids nobody asked (a forged or late answer), ids reused while in flight. The
  sender gets a JSON-RPC error (id null where the frame cannot be addressed); nothing of such
  a frame reaches the other side.

Who answers, in order: the rules (``allow``/``deny`` patterns), then the client's user through
elicitation racing remote answers on the store's board (``broker answer``), then nothing:
``unavailable``. Every question is bounded by *deadline* seconds for the elicitation and the
remote answer.

The relay is split by concept: ``_pump.py`` (the outboxes and their writers), ``_ledger.py``
(which requests each side still waits on), ``_calls.py`` (the held calls and their questions),
``_elicit.py`` (the client's user as an answerer); this module reads both sides and routes
each frame.

Shutdown: when either side closes its stream, held questions are withdrawn (each settles
``cancelled`` with its audit pair), the relay stops reading, the server's stdin is closed;
requests the server never answered get a JSON-RPC error when the server is gone. A client
that closes its stream (MCP's stdio shutdown, or a piped client right after its last request)
first gets what it sent decided and answered, within ``answer_grace`` seconds.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import attrs
import trio

from .._broker import Broker
from .._display import printable
from .._framing import read_lines
from ._calls import MAX_HELD, REASON_ARGUMENTS, CallGate
from ._elicit import Elicitor, waterfall
from ._frames import (
    INVALID_REQUEST,
    PARSE_ERROR,
    SERVER_ERROR,
    FrameError,
    Kind,
    classify,
    error_response,
    id_key,
    is_gated_method,
    parse_frame,
    valid_id,
)
from ._ledger import GATE_ID_PREFIX, MAX_OUTSTANDING, Ledger
from ._messages import advertises_form_elicitation
from ._pump import Pump
from ._rules import GateRules

__all__ = [
    "ANSWER_GRACE",
    "GATE_ID_PREFIX",
    "MAX_HELD",
    "MAX_LINE_BYTES",
    "REASON_ARGUMENTS",
    "relay",
]

log = logging.getLogger("broker.mcp")

#: The longest line either side may send (MCP's stdio transport has no limit; ours is 4 MiB).
MAX_LINE_BYTES: Final = 4 * 1024 * 1024
#: Seconds what a client sent is still decided and answered after it closed its stream, in
#: ``broker mcp-gate`` (:func:`serve_mcp_gate`); :func:`relay` itself defaults to 0.
ANSWER_GRACE: Final = 2.0
#: Seconds between looks at what is still in flight once the client closed its stream.
_SETTLE_POLL: Final = 0.01


@attrs.define(eq=False)
class _Relay:
    """One connection: reads both sides and routes each frame to the pump (pass through),
    the ledger (ids in flight), the call gate (tools/call) or the elicitor (its answers)."""

    client_in: trio.abc.ReceiveStream
    upstream_in: trio.abc.ReceiveStream
    max_line_bytes: int
    pump: Pump
    ledger: Ledger
    calls: CallGate
    elicitor: Elicitor
    #: Seconds what the client sent is still answered after it closed its stream.
    answer_grace: float = 0.0
    upstream_gone: bool = attrs.field(init=False, default=False)

    async def run(self, client_out: trio.abc.SendStream, upstream_out: trio.abc.SendStream) -> None:
        """Relay until either side closes its stream (module doc, shutdown).

        Teardown order: stop reading both sides → withdraw held calls (each settles
        ``cancelled``; what the gate still says to the client is sent only if its outbox has
        room) → answer the server's unanswered requests with errors if it is gone → close
        both outboxes → let the writers drain them, bounded by the pump's grace (a peer
        that stopped reading cannot hold the gate open) → close both output streams.

        Cancellation: as teardown, cut short; ``Cancelled`` propagates.
        """
        await self.pump.run(client_out, upstream_out, self._serve)

    async def _serve(self) -> None:
        await self.calls.run(self._read_both)
        if self.upstream_gone:
            self.ledger.server_gone()

    async def _read_both(self) -> None:
        async with trio.open_nursery() as readers:
            readers.start_soon(self._read_client, readers.cancel_scope)
            readers.start_soon(self._read_upstream, readers.cancel_scope)
            readers.start_soon(self.ledger.expire)

    # -- the client's side -----------------------------------------------------------------

    async def _read_client(self, readers: trio.CancelScope) -> None:
        try:
            await read_lines(self.client_in, self.max_line_bytes, self._on_client_line)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.info("the client's stream broke", exc_info=True)
        else:
            await self._settle_in_flight()
        readers.cancel(reason="the MCP client closed its stream")
        await trio.lowlevel.checkpoint()

    async def _settle_in_flight(self) -> None:
        """The client closed its stream (MCP's stdio shutdown; a piped client does so right
        after its last request): what it sent before is still decided and answered — held
        calls by whoever answers, the server's responses relayed — for at most
        ``answer_grace`` seconds, so a client that left cannot hold the gate open."""
        if self.answer_grace <= 0:
            await trio.lowlevel.checkpoint()
            return
        with trio.move_on_after(self.answer_grace):
            await trio.lowlevel.checkpoint()
            # Polled: both tables change in many places, and this runs once per connection.
            while self.calls.held or self.calls.retries or self.ledger.upstream_pending:  # noqa: ASYNC110
                await trio.sleep(_SETTLE_POLL)

    async def _reply_client(self, line: bytes) -> None:
        await self.pump.to_client.send(line)

    async def _on_client_line(self, line: bytes | None) -> None:
        if line is None:
            await self._reply_client(
                error_response(
                    None,
                    INVALID_REQUEST,
                    f"message longer than {self.max_line_bytes} bytes: the gate dropped it",
                )
            )
            return
        try:
            message = parse_frame(line)
        except FrameError as exc:
            await self._reply_client(error_response(None, PARSE_ERROR, f"parse error: {exc}"))
            return
        if isinstance(message, list):
            await self._reply_client(
                error_response(
                    None,
                    INVALID_REQUEST,
                    "batches are not relayed by the MCP gate: send one message per line",
                )
            )
            return
        if not isinstance(message, dict):
            await self._reply_client(
                error_response(None, INVALID_REQUEST, "not a JSON-RPC message: expected an object")
            )
            return
        try:
            kind = classify(message)
        except FrameError as exc:
            request_id = message.get("id")
            await self._reply_client(
                error_response(
                    request_id if valid_id(request_id) else None, INVALID_REQUEST, str(exc)
                )
            )
            return
        if kind is Kind.RESPONSE:
            await self._client_response(message, line)
            return
        method: str = message["method"]
        if is_gated_method(method):
            if kind is Kind.NOTIFICATION:
                # No id: no one could be told the outcome, so it is never forwarded.
                log.warning("dropped a %r notification: a tool call needs an id", printable(method))
                await trio.lowlevel.checkpoint()
                return
            await self.calls.hold(message)
            return
        if kind is Kind.NOTIFICATION:
            if method == "notifications/cancelled" and self.calls.withdraw(message):
                await trio.lowlevel.checkpoint()
                return
            await self.pump.to_upstream.send(line + b"\n")
            return
        request_id = message["id"]
        if not valid_id(request_id):
            await self._reply_client(
                error_response(None, INVALID_REQUEST, "id must be a string or an integer")
            )
            return
        key = id_key(request_id)
        if key in self.ledger.upstream_pending or self.calls.in_use(key):
            await self._reply_client(
                error_response(
                    request_id,
                    INVALID_REQUEST,
                    f"id {key} is in use by a request still waiting: use a new id",
                )
            )
            return
        if self.ledger.full():
            await self._reply_client(
                error_response(
                    request_id,
                    SERVER_ERROR,
                    f"more than {MAX_OUTSTANDING} requests are waiting for the server: "
                    "wait for their responses",
                )
            )
            return
        if method == "initialize":
            self.elicitor.client_elicits = advertises_form_elicitation(message.get("params"))
        self.ledger.forward(key, request_id)
        await self.pump.to_upstream.send(line + b"\n")

    async def _client_response(self, message: dict[str, Any], line: bytes) -> None:
        key = id_key(message["id"])
        if self.elicitor.answered(key, message):
            await trio.lowlevel.checkpoint()
            return
        if self.ledger.client_answered(key):
            await self.pump.to_upstream.send(line + b"\n")
            return
        log.warning("dropped a response from the client to id %s, which no one asked", key)
        await trio.lowlevel.checkpoint()

    # -- the server's side -----------------------------------------------------------------

    async def _read_upstream(self, readers: trio.CancelScope) -> None:
        try:
            await read_lines(self.upstream_in, self.max_line_bytes, self._on_upstream_line)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.info("the server's stream broke", exc_info=True)
        self.upstream_gone = True
        readers.cancel(reason="the MCP server closed its stream")
        await trio.lowlevel.checkpoint()

    async def _on_upstream_line(self, line: bytes | None) -> None:
        # The server is untrusted: what cannot be read is dropped, and the server is told
        # (id null: which request it was cannot be known); nothing of it reaches the client.
        if line is None:
            log.warning("dropped a line from the server longer than %d bytes", self.max_line_bytes)
            await self.pump.to_upstream.send(
                error_response(
                    None,
                    INVALID_REQUEST,
                    f"message longer than {self.max_line_bytes} bytes: the gate dropped it",
                )
            )
            return
        try:
            message = parse_frame(line)
            if not isinstance(message, dict):
                raise FrameError("not a single JSON-RPC message (batches are not relayed)")
            kind = classify(message)
        except FrameError as exc:
            log.warning("dropped a line from the server: %s", exc)
            await self.pump.to_upstream.send(
                error_response(None, PARSE_ERROR, f"the gate dropped a message: {exc}")
            )
            return
        if kind is Kind.RESPONSE:
            if not self.ledger.answered(message):
                await trio.lowlevel.checkpoint()
                return
        elif kind is Kind.REQUEST:
            refused = self.ledger.server_request(message["id"])
            if refused is not None:
                await self.pump.to_upstream.send(refused)
                return
        elif message["method"] == "notifications/cancelled":
            self.ledger.server_cancelled(message)
        await self.pump.to_client.send(line + b"\n")


async def relay(
    broker: Broker,
    *,
    client_in: trio.abc.ReceiveStream,
    client_out: trio.abc.SendStream,
    upstream_in: trio.abc.ReceiveStream,
    upstream_out: trio.abc.SendStream,
    rules: GateRules | None = None,
    remote_answers: bool = False,
    deadline: float = 300.0,
    server_deadline: float = 600.0,
    max_line_bytes: int = MAX_LINE_BYTES,
    answer_grace: float = 0.0,
) -> None:
    """Gate one MCP connection (module doc) in a new session of *broker*, until either side
    closes its stream; both output streams are closed on return.

    *remote_answers* races the store's answer board against elicitation; *deadline* bounds
    the wait for each (seconds). A request forwarded to the server that it leaves unanswered
    for *server_deadline* seconds is answered with an error (and cancelled upstream). Once
    the client closed its stream, what it sent before is still decided and answered for up to
    *answer_grace* seconds (``0``: the connection ends at once).

    Cancellation: held questions settle ``cancelled`` with their audit pairs (the session's
    teardown), the streams are closed, ``Cancelled`` propagates.
    """
    if not (0 < deadline <= 86400):
        raise ValueError(f"deadline must be between 0 and 86400 seconds, got {deadline!r}")
    if not (0 < server_deadline <= 86400):
        raise ValueError(
            f"server_deadline must be between 0 and 86400 seconds, got {server_deadline!r}"
        )
    if not (0 <= answer_grace <= 60):
        raise ValueError(f"answer_grace must be between 0 and 60 seconds, got {answer_grace!r}")
    if max_line_bytes < 1024:
        raise ValueError(f"max_line_bytes must be at least 1024, got {max_line_bytes!r}")
    rules = rules or GateRules()
    async with broker.open_session() as session, session.turn():
        session.set_session_rules(rules.rule_set)
        pump = Pump()
        ledger = Ledger(pump=pump, server_deadline=server_deadline)
        calls = CallGate(
            broker=broker,
            session=session,
            pump=pump,
            ledger=ledger,
            deadline=deadline,
        )
        elicitor = Elicitor(pump=pump, calls=calls, deadline=deadline)
        state = _Relay(
            client_in=client_in,
            upstream_in=upstream_in,
            max_line_bytes=max_line_bytes,
            pump=pump,
            ledger=ledger,
            calls=calls,
            elicitor=elicitor,
            answer_grace=answer_grace,
        )
        remote = broker.remote_answerer(deadline=deadline) if remote_answers else None
        async with broker.answerer(waterfall(elicitor, remote), scope=session.agent):
            await state.run(client_out, upstream_out)
