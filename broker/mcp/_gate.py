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

Shutdown: when either side closes its stream, held questions are withdrawn (each settles
``cancelled`` with its audit pair), the relay stops reading, the server's stdin is closed;
requests the server never answered get a JSON-RPC error when the server is gone.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import secrets
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._decision import Answer
from .._display import printable
from .._errors import BrokerError
from .._first_answer import first_answer
from .._request import ApprovalRequest
from .._signal import AbortSignal
from .._vocabulary import Outcome
from ..acp._framing import read_lines
from ._frames import (
    FrameError,
    Kind,
    classify,
    encode,
    error_response,
    id_key,
    is_gated_method,
    parse_frame,
    valid_id,
)
from ._messages import (
    INPUT_KEY,
    advertises_form_elicitation,
    canonical,
    elicitation_message,
    elicited,
    is_stateless,
    refusal,
    stateless_elicits,
)
from ._rules import GateRules

if TYPE_CHECKING:
    from .._answerers import AnswerFn, AnswerNext
    from .._broker import Broker
    from .._session import Session

__all__ = ["GATE_ID_PREFIX", "MAX_HELD", "MAX_LINE_BYTES", "REASON_ARGUMENTS", "relay"]

log = logging.getLogger("broker.mcp")

#: The longest line either side may send (MCP's stdio transport has no limit; ours is 4 MiB).
MAX_LINE_BYTES: Final = 4 * 1024 * 1024
#: Tool calls waiting for an answer at once; one more is refused at once (fail closed).
MAX_HELD: Final = 64
#: Requests awaiting their response, per direction; one more is refused with an error.
MAX_OUTSTANDING: Final = 1024
#: Lines queued for one side before the reader of the other side waits (backpressure).
OUTBOX: Final = 64
#: Seconds the writers get to hand over what is queued once the connection ended.
DRAIN_GRACE: Final = 2.0
#: How much of the arguments ``approval/asked`` records in its reason.
REASON_ARGUMENTS: Final = 400
#: Every id of the gate's own requests starts so; a server request using it is refused.
GATE_ID_PREFIX: Final = "broker-mcp-gate-"

_INVALID_REQUEST = -32600
_METHOD_NOT_FOUND = -32601
_INVALID_PARAMS = -32602
_PARSE_ERROR = -32700
_SERVER_ERROR = -32000


@attrs.define(eq=False)
class _Held:
    """A ``tools/call`` waiting for its answer. Invariant: in ``_Relay.held`` exactly until
    its outcome is known; then forwarded (and in ``upstream_pending``) or answered."""

    key: str
    request_id: object
    message: dict[str, Any]
    name: str
    arguments: str
    line: bytes
    stateless: bool
    #: A 2026-07-28 client that can be asked by an input-required result.
    elicits: bool = False
    signal: AbortSignal = attrs.field(factory=AbortSignal)
    withdrawn_by_client: bool = False
    #: The requestState of the input-required result sent for it; its retry carries it back.
    token: str | None = None
    retried: trio.Event = attrs.field(factory=trio.Event)
    responses: object = None


#: The held call whose question the current task asks (answerers run in the asking task).
_CURRENT: contextvars.ContextVar[_Held | None] = contextvars.ContextVar(
    "broker_mcp_held", default=None
)


@attrs.define(eq=False)
class _Waiting:
    """A client's request forwarded to the server, waiting for its response until
    *deadline* (trio time)."""

    request_id: object
    deadline: float
    #: For an allowed tools/call: its name and arguments' text (to recognise its continuation).
    call: tuple[str, str] | None = None


@attrs.define(eq=False)
class _Ask:
    """One of the gate's own requests to the client, waiting for its response."""

    done: trio.Event = attrs.field(factory=trio.Event)
    response: dict[str, Any] | None = None


@attrs.define(eq=False)
class _Relay:
    """The state of one connection; its tasks live in :meth:`run`'s nurseries."""

    broker: Broker
    session: Session
    client_in: trio.abc.ReceiveStream
    client_out: trio.abc.SendStream
    upstream_in: trio.abc.ReceiveStream
    upstream_out: trio.abc.SendStream
    deadline: float
    max_line_bytes: int
    server_deadline: float
    #: Whose answers are the rules' (``answeredBy``): a tool they allowed is then granted.
    rules_source: str
    to_client: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    to_upstream: trio.MemorySendChannel[bytes] = attrs.field(init=False)
    _client_rx: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    _upstream_rx: trio.MemoryReceiveChannel[bytes] = attrs.field(init=False)
    #: id key -> the held call (tools/call waiting for the broker).
    held: dict[str, _Held] = attrs.field(init=False, factory=dict)
    #: id key -> the client's requests the server has not answered yet. Invariant: in
    #: deadline order (every entry gets the same bound and is added at the end), so the
    #: first entry is the next to expire.
    upstream_pending: dict[str, _Waiting] = attrs.field(init=False, factory=dict)
    #: id keys of the server's requests the client has not answered yet.
    client_pending: set[str] = attrs.field(init=False, factory=set)
    #: id key -> the gate's own requests to the client.
    asks: dict[str, _Ask] = attrs.field(init=False, factory=dict)
    #: requestState -> a held call answered with input-required, waiting for its retry.
    retries: dict[str, _Held] = attrs.field(init=False, factory=dict)
    #: The server's requestState -> the allowed call (name, arguments' text) it continues.
    continuations: dict[str, tuple[str, str]] = attrs.field(init=False, factory=dict)
    client_elicits: bool = attrs.field(init=False, default=False)
    upstream_gone: bool = attrs.field(init=False, default=False)
    closing: bool = attrs.field(init=False, default=False)
    _calls: trio.Nursery | None = attrs.field(init=False, default=None)
    _forwarded: trio.Event = attrs.field(init=False, factory=trio.Event)
    _ask_ids: itertools.count[int] = attrs.field(init=False, factory=itertools.count)
    _id_prefix: str = attrs.field(init=False, factory=lambda: GATE_ID_PREFIX + secrets.token_hex(8))

    def __attrs_post_init__(self) -> None:
        self.to_client, self._client_rx = trio.open_memory_channel[bytes](OUTBOX)
        self.to_upstream, self._upstream_rx = trio.open_memory_channel[bytes](OUTBOX)

    async def run(self) -> None:
        """Relay until either side closes its stream (module doc, shutdown).

        Teardown order: stop reading both sides → withdraw held calls (each settles
        ``cancelled``; what the gate still says to the client is sent only if its outbox has
        room) → answer the server's unanswered requests with errors if it is gone → close
        both outboxes → let the writers drain them, bounded by :data:`DRAIN_GRACE` (a peer
        that stopped reading cannot hold the gate open) → close both output streams.
        """
        async with trio.open_nursery() as io:
            io.start_soon(_write, self.client_out, self._client_rx, "client")
            io.start_soon(_write, self.upstream_out, self._upstream_rx, "server")
            async with self.to_client, self.to_upstream:
                async with trio.open_nursery() as calls:
                    self._calls = calls
                    async with trio.open_nursery() as readers:
                        readers.start_soon(self._read_client, readers.cancel_scope)
                        readers.start_soon(self._read_upstream, readers.cancel_scope)
                        readers.start_soon(self._expire)
                    self.closing = True
                    for held in [*self.held.values(), *self.retries.values()]:
                        held.signal.abort("the MCP connection ended")
                if self.upstream_gone:
                    for waiting in self.upstream_pending.values():
                        self.send_nowait(
                            self.to_client,
                            error_response(
                                waiting.request_id,
                                _SERVER_ERROR,
                                "the MCP server exited before answering: see its standard error",
                            ),
                        )
                    self.upstream_pending.clear()
            io.cancel_scope.deadline = trio.current_time() + DRAIN_GRACE

    def _forward(self, key: str, request_id: object, call: tuple[str, str] | None = None) -> None:
        """Record a request about to be forwarded to the server (see ``upstream_pending``)."""
        deadline = trio.current_time() + self.server_deadline
        self.upstream_pending[key] = _Waiting(request_id=request_id, deadline=deadline, call=call)
        self._forwarded.set()

    async def _expire(self) -> None:
        """Answer each request the server leaves unanswered past its deadline: the client
        gets an error, the server ``notifications/cancelled``; a late response is dropped.
        Runs beside the readers; ends with them (cancelled)."""
        while True:
            if not self.upstream_pending:
                self._forwarded = trio.Event()
                await self._forwarded.wait()
                continue
            key, waiting = next(iter(self.upstream_pending.items()))
            if trio.current_time() < waiting.deadline:
                await trio.sleep_until(waiting.deadline)
                continue  # it may have been answered meanwhile: look again
            del self.upstream_pending[key]
            log.warning("the server did not answer request %s in time", key)
            await self.to_client.send(
                error_response(
                    waiting.request_id,
                    _SERVER_ERROR,
                    f"the MCP server did not answer within {self.server_deadline:g} seconds: "
                    "the gate gave up on it (see --server-deadline)",
                )
            )
            cancelled = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": waiting.request_id, "reason": "no answer in time"},
            }
            await self.to_upstream.send(encode(cancelled))

    @staticmethod
    def send_nowait(channel: trio.MemorySendChannel[bytes], line: bytes) -> None:
        """Queue *line* if there is room; during teardown a peer that stopped reading loses
        what it would not read, and the gate does not wait for it."""
        try:
            channel.send_nowait(line)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.info("dropped a line for a peer that is not reading (teardown)")

    async def _send(self, channel: trio.MemorySendChannel[bytes], line: bytes) -> None:
        # While serving, backpressure; while closing, never wait on a peer (teardown order).
        if self.closing:
            self.send_nowait(channel, line)
            await trio.lowlevel.checkpoint()
        else:
            await channel.send(line)

    # -- the client's side -----------------------------------------------------------------

    async def _read_client(self, readers: trio.CancelScope) -> None:
        try:
            await read_lines(self.client_in, self.max_line_bytes, self._on_client_line)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            log.info("the client's stream broke", exc_info=True)
        readers.cancel(reason="the MCP client closed its stream")
        await trio.lowlevel.checkpoint()

    async def _reply_client(self, line: bytes) -> None:
        await self.to_client.send(line)

    async def _on_client_line(self, line: bytes | None) -> None:
        if line is None:
            await self._reply_client(
                error_response(
                    None,
                    _INVALID_REQUEST,
                    f"message longer than {self.max_line_bytes} bytes: the gate dropped it",
                )
            )
            return
        try:
            message = parse_frame(line)
        except FrameError as exc:
            await self._reply_client(error_response(None, _PARSE_ERROR, f"parse error: {exc}"))
            return
        if isinstance(message, list):
            await self._reply_client(
                error_response(
                    None,
                    _INVALID_REQUEST,
                    "batches are not relayed by the MCP gate: send one message per line",
                )
            )
            return
        if not isinstance(message, dict):
            await self._reply_client(
                error_response(None, _INVALID_REQUEST, "not a JSON-RPC message: expected an object")
            )
            return
        try:
            kind = classify(message)
        except FrameError as exc:
            request_id = message.get("id")
            await self._reply_client(
                error_response(
                    request_id if valid_id(request_id) else None, _INVALID_REQUEST, str(exc)
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
            await self._hold(message)
            return
        if kind is Kind.NOTIFICATION:
            if method == "notifications/cancelled" and self._withdraw(message):
                await trio.lowlevel.checkpoint()
                return
            await self.to_upstream.send(line + b"\n")
            return
        request_id = message["id"]
        if not valid_id(request_id):
            await self._reply_client(
                error_response(None, _INVALID_REQUEST, "id must be a string or an integer")
            )
            return
        key = id_key(request_id)
        if key in self.upstream_pending or key in self.held:
            await self._reply_client(
                error_response(
                    request_id,
                    _INVALID_REQUEST,
                    f"id {key} is in use by a request still waiting: use a new id",
                )
            )
            return
        if len(self.upstream_pending) >= MAX_OUTSTANDING:
            await self._reply_client(
                error_response(
                    request_id,
                    _SERVER_ERROR,
                    f"more than {MAX_OUTSTANDING} requests are waiting for the server: "
                    "wait for their responses",
                )
            )
            return
        if method == "initialize":
            self.client_elicits = advertises_form_elicitation(message.get("params"))
        self._forward(key, request_id)
        await self.to_upstream.send(line + b"\n")

    async def _client_response(self, message: dict[str, Any], line: bytes) -> None:
        key = id_key(message["id"])
        ask = self.asks.get(key)
        if ask is not None:
            ask.response = message
            ask.done.set()
            await trio.lowlevel.checkpoint()
            return
        if key in self.client_pending:
            self.client_pending.discard(key)
            await self.to_upstream.send(line + b"\n")
            return
        log.warning("dropped a response from the client to id %s, which no one asked", key)
        await trio.lowlevel.checkpoint()

    def _withdraw(self, message: dict[str, Any]) -> bool:
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if not valid_id(request_id):
            return False
        key = id_key(request_id)
        held = self.held.get(key)
        if held is not None:
            held.withdrawn_by_client = True
            held.signal.abort("the MCP client cancelled the call")
            return True
        # The server may still answer; the client ignores that answer, and so do we.
        self.upstream_pending.pop(key, None)
        return False

    async def _hold(self, message: dict[str, Any]) -> None:
        request_id = message["id"]
        method: str = message["method"]
        if not valid_id(request_id):
            await self._reply_client(
                error_response(
                    None, _INVALID_REQUEST, "a tools/call id must be a string or an integer"
                )
            )
            return
        if method != "tools/call":
            await self._reply_client(
                error_response(
                    request_id,
                    _METHOD_NOT_FOUND,
                    f"method {printable(method)!r} is not forwarded: spell it tools/call",
                )
            )
            return
        key = id_key(request_id)
        if key in self.held or key in self.upstream_pending:
            await self._reply_client(
                error_response(
                    request_id,
                    _INVALID_REQUEST,
                    f"id {key} is in use by a request still waiting: use a new id",
                )
            )
            return
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(name, str) or not name.strip():
            await self._reply_client(
                error_response(
                    request_id, _INVALID_PARAMS, "tools/call params.name must be a non-empty string"
                )
            )
            return
        arguments = params.get("arguments", {})
        if not isinstance(arguments, dict):
            await self._reply_client(
                error_response(
                    request_id, _INVALID_PARAMS, "tools/call params.arguments must be an object"
                )
            )
            return
        state = params.get("requestState")
        if isinstance(state, str) and state.startswith(GATE_ID_PREFIX):
            await self._retried(key, message, name, arguments, state)
            return
        room = len(self.upstream_pending) < MAX_OUTSTANDING
        if isinstance(state, str) and room and self._continues(state, message, name, arguments):
            # The retry the server asked for, of a call allowed once: the same call going on,
            # not a new one (its question was asked); forwarded as sent, re-encoded.
            log.info("forwarded call %s: it continues an allowed call (requestState)", key)
            line, shown = canonical(message, arguments)
            self._forward(key, request_id, (name, shown))
            await self.to_upstream.send(line)
            return
        if len(self.held) + len(self.retries) >= MAX_HELD or self.closing or self._calls is None:
            log.warning("refused tool call %s at once: %d calls are waiting", key, len(self.held))
            await self._reply_client(
                refusal(request_id, name, Outcome.UNAVAILABLE, stateless=is_stateless(params))
            )
            return
        line, shown = canonical(message, arguments)
        held = _Held(
            key=key,
            request_id=request_id,
            message=message,
            name=name,
            arguments=shown,
            line=line,
            stateless=is_stateless(params),
            elicits=stateless_elicits(params),
        )
        self.held[key] = held
        self._calls.start_soon(self._decide, held)
        await trio.lowlevel.checkpoint()

    def _note_continuation(self, message: dict[str, Any], call: tuple[str, str]) -> None:
        """An allowed call's server answered input-required with a ``requestState``: the
        client's retry carrying it (same call) continues that call (``_continues``)."""
        result = message.get("result")
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            return
        state = result.get("requestState")
        if not isinstance(state, str) or state.startswith(GATE_ID_PREFIX):
            return
        if len(self.continuations) >= MAX_OUTSTANDING:
            del self.continuations[next(iter(self.continuations))]  # the oldest
        self.continuations[state] = call

    def _continues(self, state: str, message: dict[str, Any], name: str, arguments: object) -> bool:
        """Whether a tools/call carrying the server's *state* repeats the allowed call that
        state was issued for (each state is used once)."""
        call = self.continuations.pop(state, None)
        return call is not None and call == (name, canonical(message, arguments)[1])

    async def _retried(
        self, key: str, message: dict[str, Any], name: str, arguments: object, state: str
    ) -> None:
        """A 2026-07-28 client retries a call the gate answered with input-required: the
        retry takes the held call's place (its id gets the outcome); it must repeat the very
        call asked about, and is never forwarded as sent (the server did not ask for input)."""
        request_id = message["id"]
        held = self.retries.get(state)
        if held is None:
            await self._reply_client(
                error_response(
                    request_id,
                    _INVALID_PARAMS,
                    "requestState names no question waiting for an answer: call the tool "
                    "again without it",
                )
            )
            return
        _, shown = canonical(message, arguments)
        if name != held.name or shown != held.arguments:
            await self._reply_client(
                error_response(
                    request_id,
                    _INVALID_PARAMS,
                    "a retried tools/call must repeat the call asked about (same name and "
                    "arguments): retry it unchanged, or call the tool again without requestState",
                )
            )
            return
        params = message["params"]
        del self.retries[state]
        held.key, held.request_id = key, request_id
        held.line, _ = canonical({**held.message, "id": request_id}, arguments)
        held.responses = params.get("inputResponses")
        self.held[key] = held
        held.retried.set()
        await trio.lowlevel.checkpoint()

    async def _decide(self, held: _Held) -> None:
        arguments = held.arguments
        cut = (
            arguments if len(arguments) <= REASON_ARGUMENTS else arguments[:REASON_ARGUMENTS] + "…"
        )
        request_id = held.request_id
        _CURRENT.set(held)  # this task's context: its answerers (and their tasks) see it
        req = ApprovalRequest(
            agent=self.session.agent,
            tool_name=held.name,
            call_id=request_id if isinstance(request_id, str) else str(request_id),
            reason=f"MCP tool call: {held.name} {cut}",
            display_reason=f"MCP tool call: {held.name}, arguments: {arguments}",
            signal=held.signal,
        )
        by_rules = False
        try:
            decision = await self.broker.request_decision(req)
            outcome = decision.outcome
            by_rules = decision.answered_by == self.rules_source
        except BrokerError:
            # Containment: a question that could not be put fails closed.
            log.warning("tool call %s could not be asked; refused", held.key, exc_info=True)
            outcome = Outcome.UNAVAILABLE
        if held.token is not None and not held.retried.is_set():
            # Its id was answered with input-required: only its retry can take the outcome.
            if not self.closing:
                with trio.move_on_after(self.deadline):
                    await held.retried.wait()
            if not held.retried.is_set():
                del self.retries[held.token]
                log.info("call %s was decided %s; its retry never came", held.key, outcome)
                await trio.lowlevel.checkpoint()
                return
        # Invariant: leaving ``held`` and entering ``upstream_pending`` with no checkpoint
        # between, so a response or a reused id is never judged against a stale state.
        key, request_id = held.key, held.request_id
        del self.held[key]
        if outcome is Outcome.ALLOWED_ONCE:
            self._forward(key, request_id, (held.name, held.arguments))
            await self._send(self.to_upstream, held.line)
            if by_rules and not self.closing:
                await self._grant(held.name)
        elif not held.withdrawn_by_client:
            answer = refusal(request_id, held.name, outcome, stateless=held.stateless)
            await self._send(self.to_client, answer)
        else:
            await trio.lowlevel.checkpoint()

    async def _grant(self, name: str) -> None:
        """The rules allow *name* for the whole connection: remember it on the session, so
        its next calls are decided at admission (``remembered: true``), their ``asked`` and
        ``decided`` made durable together — one wait on the store instead of two."""
        try:
            await self.broker.grant(self.session, name)
        except BrokerError:
            # Containment: without the grant the next call is asked through the rules again.
            log.warning("could not remember tool %r for the session", name, exc_info=True)
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
            await self.to_upstream.send(
                error_response(
                    None,
                    _INVALID_REQUEST,
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
            await self.to_upstream.send(
                error_response(None, _PARSE_ERROR, f"the gate dropped a message: {exc}")
            )
            return
        if kind is Kind.RESPONSE:
            key = id_key(message["id"])
            if key not in self.upstream_pending:
                # Forged or late: the client is not waiting for it (a held call's id included).
                log.warning("dropped a response from the server to id %s, not asked", key)
                await trio.lowlevel.checkpoint()
                return
            waiting = self.upstream_pending.pop(key)
            if waiting.call is not None:
                self._note_continuation(message, waiting.call)
            await self.to_client.send(line + b"\n")
            return
        if kind is Kind.REQUEST:
            request_id = message["id"]
            if not valid_id(request_id):
                await self.to_upstream.send(
                    error_response(None, _INVALID_REQUEST, "id must be a string or an integer")
                )
                return
            key = id_key(request_id)
            ours = isinstance(request_id, str) and request_id.startswith(GATE_ID_PREFIX)
            if ours or key in self.client_pending:
                await self.to_upstream.send(
                    error_response(
                        request_id, _INVALID_REQUEST, f"id {key} is in use: use a new id"
                    )
                )
                return
            if len(self.client_pending) >= MAX_OUTSTANDING:
                await self.to_upstream.send(
                    error_response(
                        request_id,
                        _SERVER_ERROR,
                        f"more than {MAX_OUTSTANDING} requests are waiting for the client",
                    )
                )
                return
            self.client_pending.add(key)
        elif message["method"] == "notifications/cancelled":
            params = message.get("params")
            request_id = params.get("requestId") if isinstance(params, dict) else None
            if valid_id(request_id):
                self.client_pending.discard(id_key(request_id))
        await self.to_client.send(line + b"\n")

    # -- the client's user as an answerer (elicitation) --------------------------------------

    async def elicit(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        """Ask the client's user with ``elicitation/create`` (when the client advertised form
        elicitation; else delegate): accept → allowed-once, decline → rejected, cancel →
        cancelled; an error or no answer within the deadline → unavailable.

        Cancellation: the client is sent ``notifications/cancelled`` for the request (when
        its outbox has room: cleanup never waits on the client) and the wait ends.
        """
        held = _CURRENT.get()
        if held is not None and held.stateless:
            if not held.elicits or held.token is not None or self.closing:
                return await next_()
            return await self._elicit_by_input_required(held, req)
        if not self.client_elicits or self.closing:
            return await next_()
        request_id = f"{self._id_prefix}-{next(self._ask_ids)}"
        key = id_key(request_id)
        ask = _Ask()
        self.asks[key] = ask
        try:
            await self.to_client.send(
                encode(
                    {
                        "jsonrpc": "2.0",
                        "id": request_id,
                        "method": "elicitation/create",
                        "params": {
                            "message": elicitation_message(req),
                            "requestedSchema": {"type": "object", "properties": {}},
                        },
                    }
                )
            )
            with trio.move_on_after(self.deadline):
                await ask.done.wait()
        finally:
            del self.asks[key]
            if ask.response is None:
                self._cancel_nowait(request_id)
        return elicited(ask.response)

    async def _elicit_by_input_required(
        self, held: _Held, req: ApprovalRequest
    ) -> Outcome | Answer:
        """The 2026-07-28 way: answer the held call with an input-required result asking the
        question, and take the answer from the client's retry of the call (bounded by the
        deadline). The retry takes the call's place whoever answers (see ``_decide``)."""
        token = f"{self._id_prefix}-state-{next(self._ask_ids)}"
        held.token = token
        del self.held[held.key]
        self.retries[token] = held
        question = {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": elicitation_message(req),
                "requestedSchema": {"type": "object", "properties": {}},
            },
        }
        result = {
            "resultType": "input_required",
            "inputRequests": {INPUT_KEY: question},
            "requestState": token,
        }
        await self.to_client.send(
            encode({"jsonrpc": "2.0", "id": held.request_id, "result": result})
        )
        with trio.move_on_after(self.deadline):
            await held.retried.wait()
        responses = held.responses
        answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
        return elicited({"result": answer} if held.retried.is_set() else None)

    def _cancel_nowait(self, request_id: str) -> None:
        notice = {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": request_id, "reason": "the approval question was settled"},
        }
        try:
            self.to_client.send_nowait(encode(notice))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            log.info("could not tell the client that elicitation %s is over", request_id)


async def _write(
    stream: trio.abc.SendStream, lines: trio.MemoryReceiveChannel[bytes], who: str
) -> None:
    """Write each line to *stream* until the channel closes, then close *stream*. A broken
    stream is logged and what follows is discarded (so senders never block on a dead peer)."""
    broken = False
    try:
        async with lines:
            async for line in lines:
                if broken:
                    continue
                try:
                    await stream.send_all(line)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    log.info("the %s's stream broke; discarding what is sent to it", who)
                    broken = True
    finally:
        # trio closes the stream even when this is cancelled (the drain deadline).
        await stream.aclose()


def waterfall(relay: _Relay, rules: GateRules, remote: AnswerFn | None) -> AnswerFn:
    """Rules first, then elicitation racing *remote* (if any), then the chain's end."""
    after_rules: AnswerFn = first_answer(relay.elicit, remote) if remote else relay.elicit

    async def answer(req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        decided = rules.decide(req.tool_name)
        if decided is not None:
            await trio.lowlevel.checkpoint()
            return Answer(outcome=decided, by=rules.source)
        return await after_rules(req, next_)

    return answer


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
) -> None:
    """Gate one MCP connection (module doc) in a new session of *broker*, until either side
    closes its stream; both output streams are closed on return.

    *remote_answers* races the store's answer board against elicitation; *deadline* bounds
    the wait for each (seconds). A request forwarded to the server that it leaves unanswered
    for *server_deadline* seconds is answered with an error (and cancelled upstream).

    Cancellation: held questions settle ``cancelled`` with their audit pairs (the session's
    teardown), the streams are closed, ``Cancelled`` propagates.
    """
    if not (0 < deadline <= 86400):
        raise ValueError(f"deadline must be between 0 and 86400 seconds, got {deadline!r}")
    if not (0 < server_deadline <= 86400):
        raise ValueError(
            f"server_deadline must be between 0 and 86400 seconds, got {server_deadline!r}"
        )
    if max_line_bytes < 1024:
        raise ValueError(f"max_line_bytes must be at least 1024, got {max_line_bytes!r}")
    async with broker.open_session() as session, session.turn():
        state = _Relay(
            broker=broker,
            session=session,
            client_in=client_in,
            client_out=client_out,
            upstream_in=upstream_in,
            upstream_out=upstream_out,
            deadline=deadline,
            server_deadline=server_deadline,
            rules_source=(rules or GateRules()).source,
            max_line_bytes=max_line_bytes,
        )
        remote = broker.remote_answerer(deadline=deadline) if remote_answers else None
        async with broker.answerer(
            waterfall(state, rules or GateRules(), remote), scope=session.agent
        ):
            await state.run()
