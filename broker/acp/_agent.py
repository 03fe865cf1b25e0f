"""The ACP agent side (v1): ``initialize``, ``session/new``, ``session/load``, ``session/prompt``,
``session/cancel``.

Each ACP session is a broker session actor. Its :class:`AcpAnswerer` lives in that actor's
nursery (``session.start_answerer``), scoped to that session's agent; the connection's session
map owns the agents, so an answerer answers only for its own agent (exact identity).

Synopsis::

    conn = JsonRpcConnection(send_stream=..., receive_stream=...)
    await serve_acp(conn, broker, composition)     # until the client hangs up

When the connection ends, every pending question of its sessions resolves ``unavailable`` (the
answerer's request fails with ``ConnectionClosed``) and is audited; the running prompts are
cancelled (their turns end ``cancelled``); then the sessions are closed in the documented order.
"""

from __future__ import annotations

import collections
import logging
import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import __version__
from .._collapse import collapse_single
from .._errors import ResumeError
from .._events import Event
from .._first_answer import first_answer
from .._signal import AbortSignal
from ..agent import LoopObserver, StopReason, unfinished_text
from ..store import SessionOwnedError
from ..tools import ToolCall as RuntimeToolCall
from ._answerer import AcpAnswerer
from ._errors import ConnectionClosed, ErrorCode, JsonRpcError, WireDecodeError
from ._replay import replay, tool_call_finished, tool_call_started
from ._wire import (
    PROTOCOL_VERSION,
    AcpMethod,
    AgentCapabilities,
    AgentMessageChunk,
    CancelNotification,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
    ResourceLink,
    SessionNotification,
    SessionUpdate,
    TextContent,
    from_wire,
    params_from_wire,
    to_wire,
)
from ._wire import StopReason as WireStopReason

if TYPE_CHECKING:
    from .._broker import Broker
    from .._composition import Composition
    from .._session import Session
    from ..agent import AgentLoop
    from ..tools import BubblewrapExecutor, PlainExecutor, ToolResult
    from ._jsonrpc import JsonRpcConnection

__all__ = ["AcpAgent", "serve_acp"]

log = logging.getLogger("broker.acp")

#: How long a cancelled prompt may spend telling the client its unfinished calls failed.
_UNFINISHED_GRACE = 1.0

_STOP = {
    StopReason.END_TURN: WireStopReason.END_TURN,
    StopReason.CANCELLED: WireStopReason.CANCELLED,
    StopReason.MAX_TURN_REQUESTS: WireStopReason.MAX_TURN_REQUESTS,
}


@attrs.define(eq=False)
class _AcpSession:
    """One ACP session: its broker session, loop, and the signals of its prompts.

    ``arrived`` holds a signal per prompt request read off the wire whose handler has not
    started yet (given at reception, in wire order); ``prompt_signal`` the running prompt's.
    A ``session/cancel`` aborts both, so a cancel right behind its prompt is never lost.
    """

    session: Session
    loop: AgentLoop
    #: The running tool calls by id (shared with the session's _Updates and AcpAnswerer).
    calls: dict[str, RuntimeToolCall] = attrs.field(factory=dict)
    prompt_signal: AbortSignal | None = None
    arrived: collections.deque[AbortSignal] = attrs.field(factory=collections.deque)


@attrs.define(eq=False)
class _Updates(LoopObserver):
    """Streams the loop's progress to the client as ``session/update`` notifications.

    It also keeps the session's running tool calls by id in *calls*, from ``tool_call`` to its
    result, so the session's :class:`AcpAnswerer` can tell the client what a permission
    question is about (the approval request itself carries no tool arguments, contract §1).
    """

    connection: JsonRpcConnection
    session_id: str
    calls: dict[str, RuntimeToolCall] = attrs.field(factory=dict)

    async def _send(self, update: SessionUpdate) -> None:
        notification = SessionNotification(session_id=self.session_id, update=update)
        try:
            await self.connection.notify(AcpMethod.SESSION_UPDATE, to_wire(notification))
        except ConnectionClosed:
            # The prompt is about to be cancelled by the connection's teardown; nothing to tell.
            await trio.lowlevel.checkpoint()

    async def on_agent_text(self, text: str) -> None:
        await self._send(AgentMessageChunk(content=TextContent(text=text)))

    async def on_tool_call(self, call: RuntimeToolCall) -> None:
        # Before any gate or approval: the answerer finds the call here while it asks.
        self.calls[call.id] = call
        await self._send(tool_call_started(call))

    async def on_unfinished_calls(self, call_ids: list[str], turn_end: str) -> None:
        """Tell the client that each of *call_ids* ended without a result (its turn ended
        *turn_end*). Cancellation: the calls not told yet are not."""
        await trio.lowlevel.checkpoint()
        for call_id in call_ids:
            await self._send(tool_call_finished(call_id, unfinished_text(turn_end), True))

    async def on_tool_result(self, call: RuntimeToolCall, result: ToolResult) -> None:
        self.calls.pop(call.id, None)
        await self._send(
            tool_call_finished(call.id, result.output, result.is_error or result.failed)
        )


@attrs.define(eq=False)
class AcpAgent:
    """The agent side of one ACP connection: its handlers and its session map.

    Owns: the map of this connection's sessions (each with its agent loop, its prompt signals
    and its running tool calls); the sessions' ACP answerers live in the sessions' own
    nurseries. Teardown order (:func:`serve_acp`): the connection ends (pending permission
    requests fail closed as ``unavailable``, running prompts are cancelled and their turns end)
    → :meth:`aclose` closes every session of the map concurrently, each in the session's order.
    """

    connection: JsonRpcConnection
    broker: Broker
    composition: Composition
    executor: BubblewrapExecutor | PlainExecutor
    sessions: dict[str, _AcpSession] = attrs.field(factory=dict, init=False)

    def install(self) -> None:
        """Register the handlers on the connection (before it serves)."""
        self.connection.on_request(AcpMethod.INITIALIZE, self._initialize)
        self.connection.on_request(AcpMethod.SESSION_NEW, self._new_session)
        self.connection.on_request(AcpMethod.SESSION_LOAD, self._load_session)
        self.connection.on_request(
            AcpMethod.SESSION_PROMPT, self._prompt, on_receive=self._prompt_arrived
        )
        self.connection.on_notification(AcpMethod.SESSION_CANCEL, self._cancel)

    async def _initialize(self, params: Any) -> Any:
        request = params_from_wire(InitializeRequest, params)
        # Version negotiation: echo the client's version when we speak it, else ours.
        log.info("initialize: client protocol version %s", request.protocol_version)
        await trio.lowlevel.checkpoint()
        return to_wire(
            InitializeResponse(
                protocol_version=PROTOCOL_VERSION,
                agent_capabilities=AgentCapabilities(load_session=True),
                auth_methods=(),
                agent_info=Implementation(name="broker", version=__version__),
            )
        )

    async def _new_session(self, params: Any) -> Any:
        request = params_from_wire(NewSessionRequest, params)
        workspace = await _workspace(request.cwd)
        _ignore_mcp("session/new", request.mcp_servers)
        session = await self.broker.start_session()
        await self._attach(session, workspace)
        return to_wire(NewSessionResponse(session_id=session.id))

    async def _load_session(self, params: Any) -> Any:
        """``session/load``: resume a stored session by id and replay what happened in it.

        The history goes to the client as ``session/update`` notifications, in log order,
        before the (empty) result, as the ACP spec asks (see :mod:`._replay`); the session's
        agent loop starts from the conversation its log records, so the model goes on where
        it was. A malformed id, an id the store does not hold, or a session open already is
        invalid params naming the problem, the id shortened.
        """
        request = params_from_wire(LoadSessionRequest, params)
        session_id = _checked_session_id(request.session_id)
        workspace = await _workspace(request.cwd)
        _ignore_mcp("session/load", request.mcp_servers)
        self._check_loadable(session_id)
        try:
            session = await self.broker.start_session(resume=session_id)
        except SessionOwnedError as exc:
            raise JsonRpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: sessionId {_short(session_id)!r} is held by another broker "
                f"process ({exc}): load it there, or wait until that process ends",
            ) from exc
        except ResumeError as exc:
            raise JsonRpcError(ErrorCode.INVALID_PARAMS, _resume_refused(session_id)) from exc
        events = await self.broker.store.read(session.id)
        await self._attach(session, workspace, history=events)
        for update in replay(events):
            notification = SessionNotification(session_id=session.id, update=update)
            await self.connection.notify(AcpMethod.SESSION_UPDATE, to_wire(notification))
        return to_wire(LoadSessionResponse())

    def _check_loadable(self, session_id: str) -> None:
        if session_id in self.sessions and self.sessions[session_id].session.is_open:
            raise JsonRpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: sessionId {_short(session_id)!r} is already loaded on this "
                "connection: send session/prompt to it",
            )
        if any(open_.id == session_id for open_ in self.broker.sessions):
            raise JsonRpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: sessionId {_short(session_id)!r} is in use by another "
                "connection to this agent: close that connection first, then load it",
            )

    async def _attach(
        self, session: Session, workspace: pathlib.Path, *, history: Sequence[Event] = ()
    ) -> None:
        """Give *session* its loop (its conversation restored from *history*) and its ACP
        answerer, and put it in this connection's map.

        If that fails, the session is closed here: it is in no map, so nothing else would.
        """
        try:
            await self._attach_parts(session, workspace, history)
        except BaseException:
            await session.aclose()
            raise

    async def _attach_parts(
        self, session: Session, workspace: pathlib.Path, history: Sequence[Event]
    ) -> None:
        updates = _Updates(connection=self.connection, session_id=session.id)
        loop = self.composition.build_loop(
            broker=self.broker,
            session=session,
            workspace=workspace,
            executor=self.executor,
            observer=updates,
        )
        loop.restore(history)
        answerer = AcpAnswerer(
            connection=self.connection,
            acp_session_id=session.id,
            agent=session.agent,
            broker=self.broker,
            deadline=self.composition.permission_deadline,
            allow_always=self.composition.allow_always,
            always_for=self.composition.always_for,
            calls=updates.calls,
        )
        if self.composition.remote_answers:
            # The client and anyone on the store's answer board race; the first answer wins
            # and the client's request is withdrawn ($/cancel_request).
            remote = self.broker.remote_answerer(
                allow_always=self.composition.allow_always,
                always_for=self.composition.always_for,
            )
            await session.start_answerer(first_answer(answerer, remote))
        else:
            await session.start_answerer(answerer)
        self.sessions[session.id] = _AcpSession(session=session, loop=loop, calls=updates.calls)

    def _prompt_arrived(self, params: Any) -> None:
        # Runs inline in the reader, in wire order with session/cancel (see _AcpSession).
        try:
            request = from_wire(PromptRequest, params)
        except WireDecodeError:
            return  # the handler answers -32602; no signal to give
        acp = self.sessions.get(request.session_id)
        if acp is not None and acp.session.is_open:
            acp.arrived.append(AbortSignal())

    async def _prompt(self, params: Any) -> Any:
        request = params_from_wire(PromptRequest, params)
        acp = self._session(request.session_id)
        # Invariant: _prompt_arrived appended exactly one signal for this request (same checks).
        signal = acp.arrived.popleft() if acp.arrived else AbortSignal()
        if acp.prompt_signal is not None:
            raise JsonRpcError(
                ErrorCode.INVALID_REQUEST,
                f"session {_short(request.session_id)} already has a prompt running: wait for its "
                "response or send session/cancel",
            )
        parts = []
        for block in request.prompt:
            if isinstance(block, TextContent):
                parts.append(block.text)
            elif isinstance(block, ResourceLink):
                parts.append(f"[{block.name}]({block.uri})")
        acp.prompt_signal = signal
        try:
            result = await acp.loop.prompt("\n".join(parts), signal=signal)
        finally:
            acp.prompt_signal = None
            # A prompt cancelled mid-call (the client's $/cancel_request) never reports the
            # call's result; no question about it can come after its prompt. The client is told
            # the call ended failed, in the words its replay will use (shielded, bounded).
            unfinished = list(acp.calls)
            acp.calls.clear()
            updates = acp.loop.observer
            if unfinished and isinstance(updates, _Updates):
                with trio.CancelScope(shield=True), trio.move_on_after(_UNFINISHED_GRACE):
                    await updates.on_unfinished_calls(unfinished, "cancelled")
        return to_wire(PromptResponse(stop_reason=_STOP[result.stop_reason]))

    def _cancel(self, params: Any) -> None:
        try:
            request = from_wire(CancelNotification, params)
        except WireDecodeError as exc:
            log.warning("session/cancel ignored: %s", exc)
            return
        acp = self.sessions.get(request.session_id)
        if acp is None:
            log.warning("session/cancel for unknown session %r ignored", _short(request.session_id))
            return
        # Every pending question of the prompt settles `cancelled`; the prompt answers
        # stopReason "cancelled" — also a prompt whose handler has not started yet.
        if acp.prompt_signal is not None:
            acp.prompt_signal.abort("session/cancel")
        for arrived in acp.arrived:
            arrived.abort("session/cancel")

    def _session(self, session_id: str) -> _AcpSession:
        acp = self.sessions.get(session_id)
        if acp is None or not acp.session.is_open:
            raise JsonRpcError(
                ErrorCode.INVALID_PARAMS,
                f"invalid params: unknown sessionId {_short(session_id)!r}: create one with "
                "session/new, or load a stored one with session/load",
            )
        return acp

    async def aclose(self) -> None:
        """Close every session of this connection (in parallel, each in the documented order).

        Cancellation: shielded; bounded by the broker's ``settle_grace`` per session.
        """
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for acp in self.sessions.values():
                    nursery.start_soon(acp.session.aclose)
        self.sessions.clear()
        # Never raises Cancelled: serve_acp calls this in ``finally`` (see Session.aclose).
        await trio.lowlevel.cancel_shielded_checkpoint()


#: The longest ``sessionId`` accepted (ids the broker mints are 36-character UUIDs).
MAX_SESSION_ID = 256
#: How much of a bad or unknown id an error message repeats.
_SHOWN = 40


def _short(value: str) -> str:
    """*value* as an error message repeats it: at most ``_SHOWN`` characters, then the length."""
    return value if len(value) <= _SHOWN else f"{value[:_SHOWN]}… ({len(value)} characters)"


def _checked_session_id(session_id: str) -> str:
    """*session_id* if it could name a stored session, else ``-32602`` saying what is wrong."""
    if not session_id:
        problem = "must not be empty"
    elif len(session_id) > MAX_SESSION_ID:
        problem = f"is {len(session_id)} characters long, more than {MAX_SESSION_ID}"
    elif not session_id.isprintable():
        problem = "contains control or other unprintable characters"
    else:
        return session_id
    raise JsonRpcError(
        ErrorCode.INVALID_PARAMS,
        f"invalid params: sessionId {problem} (got {_short(session_id)!r}): pass the id that "
        "session/new returned",
    )


def _resume_refused(session_id: str) -> str:
    return (
        f"invalid params: sessionId {_short(session_id)!r} is not a session this agent can "
        "load (not in its store, or not closed cleanly): create one with session/new"
    )


async def _workspace(cwd: str) -> pathlib.Path:
    workspace = pathlib.Path(cwd)
    await trio.lowlevel.checkpoint()
    try:
        usable = workspace.is_absolute() and await trio.Path(workspace).is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte, no permission
        usable = False
    if not usable:
        raise JsonRpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params: cwd must be an absolute path to an existing directory, got {cwd!r}",
        )
    return workspace


def _ignore_mcp(method: str, servers: Sequence[object]) -> None:
    if servers:
        log.warning("%s: %d MCP servers ignored (not supported)", method, len(servers))


async def serve_acp(
    connection: JsonRpcConnection,
    broker: Broker,
    composition: Composition,
    executor: BubblewrapExecutor | PlainExecutor,
    *,
    task_status: trio.TaskStatus[AcpAgent] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve one ACP connection until the client hangs up (or this task is cancelled).

    Cancellation: the connection is torn down (pending permission requests fail, prompts are
    cancelled), then every session of the connection is closed, shielded and bounded.
    """
    agent = AcpAgent(
        connection=connection, broker=broker, composition=composition, executor=executor
    )
    agent.install()
    try:
        with collapse_single():
            async with trio.open_nursery() as nursery:
                await nursery.start(connection.serve)
                task_status.started(agent)
    finally:
        await agent.aclose()
