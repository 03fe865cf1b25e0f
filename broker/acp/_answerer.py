"""The ACP answerer (contract §8.4): asks the editor that owns the session, over the connection."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import trio

from .._decision import Answer
from .._display import printable
from .._grants import always_offer, always_proposal
from .._vocabulary import Outcome
from ._errors import ConnectionClosed, JsonRpcError, WireDecodeError
from ._wire import (
    AcpMethod,
    CancelledPermissionOutcome,
    PermissionOption,
    PermissionOptionKind,
    RequestPermissionRequest,
    RequestPermissionResponse,
    TextContent,
    ToolCallContentBlock,
    ToolCallUpdate,
    ToolKind,
    from_wire,
    to_wire,
)

if TYPE_CHECKING:
    from .._agent import Agent
    from .._answerers import AnswerNext
    from .._broker import Broker
    from .._request import ApprovalRequest
    from ..tools import ToolCall as RuntimeToolCall
    from ._jsonrpc import JsonRpcConnection

__all__ = [
    "ALLOW_ALWAYS",
    "ALLOW_ALWAYS_PROJECT",
    "ALLOW_ONCE",
    "REJECT_ONCE",
    "AcpAnswerer",
    "describe_tool_call",
]

log = logging.getLogger("broker.acp")

ALLOW_ONCE = PermissionOption(
    option_id="allow-once", name="Allow once", kind=PermissionOptionKind.ALLOW_ONCE
)
REJECT_ONCE = PermissionOption(
    option_id="reject-once", name="Reject", kind=PermissionOptionKind.REJECT_ONCE
)
ALLOW_ALWAYS = PermissionOption(
    option_id="allow-always", name="Always allow", kind=PermissionOptionKind.ALLOW_ALWAYS
)
ALLOW_ALWAYS_PROJECT = PermissionOption(
    option_id="allow-always-project",
    name="Always allow in this project",
    kind=PermissionOptionKind.ALLOW_ALWAYS,
)


def always_option(rule: str, lasts: float | None = None) -> PermissionOption:
    """The "always allow" option, naming the rule it remembers for the session (``bash: git
    status``) and, when the grant ends before the session, for how long."""
    scope = "this session" if lasts is None else f"this session, for {_shown_duration(lasts)}"
    return attrs.evolve(ALLOW_ALWAYS, name=f"Always allow {printable(rule)} ({scope})")


def project_option(rule: str, rules_file: str) -> PermissionOption:
    """The "always allow, for the project" option, naming the rule and the file it is written
    to (``Always allow bash: npm run (project rules .broker/rules.toml)``)."""
    name = f"Always allow {printable(rule)} (project rules {printable(rules_file)})"
    return attrs.evolve(ALLOW_ALWAYS_PROJECT, name=name)


def _shown_duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{seconds:g} s"


def describe_tool_call(call: RuntimeToolCall) -> tuple[str, ToolKind]:
    """The title and kind a client shows for *call* (a bash call's title is its command)."""
    command = call.arguments.get("command")
    if call.name == "bash":
        return (command if isinstance(command, str) else call.name), ToolKind.EXECUTE
    return call.name, ToolKind.OTHER


def permission_tool_call(
    call_id: str, req: ApprovalRequest, call: RuntimeToolCall | None
) -> ToolCallUpdate:
    """The ``toolCall`` of the permission request for *req* (call *call_id*): what is asked, and
    why.

    *call* is the running tool call with that id, when the agent knows it: its title, kind and
    arguments (``rawInput``: the command, the requested sandbox mode, the justification) go
    along, so the client's prompt can show them. The reason becomes one text content block
    (the display reason when there is one: it is written for people, and never logged).
    """
    reason = req.display_reason or req.reason
    content = (
        (ToolCallContentBlock(content=TextContent(text=reason)),) if reason is not None else None
    )
    if call is None:
        return ToolCallUpdate(tool_call_id=call_id, title=req.tool_name, content=content)
    title, kind = describe_tool_call(call)
    raw_input: Any = dict(call.arguments)
    return ToolCallUpdate(
        tool_call_id=call_id, title=title, kind=kind, content=content, raw_input=raw_input
    )


@attrs.define(eq=False)
class AcpAnswerer:
    """Answers the questions of exactly one agent (by identity) that carry a ``call_id``.

    Anything else — another agent's question, a call-less one — is delegated with ``next()``.
    The client gets ``session/request_permission`` with the two one-shot options (plus
    ``allow-always`` when the composition honours remembered grants and the question has a rule
    to remember: its name says which, e.g. ``Always allow bash: git status (this session)``;
    and ``allow-always-project`` when the broker has a project rules file, naming it).
    Mapping: ``cancelled`` → ``cancelled``; ``allow-once`` → ``allowed-once``; ``allow-always``
    (when offered) → a grant of that rule on the session, then ``allowed-once``;
    ``allow-always-project`` → the rule also appended to the project rules file; any other
    option id → ``rejected``; a JSON-RPC error, a broken connection, a malformed answer, or no
    answer before the deadline → ``unavailable``. A withdrawn question cancels the request:
    the client is sent ``$/cancel_request`` and a late answer is dropped.

    *calls* is the session's running tool calls by id (kept by the agent's update stream):
    the permission request's ``toolCall`` carries the title, kind, ``rawInput`` and reason of
    the call being asked about (:func:`permission_tool_call`).
    """

    connection: JsonRpcConnection
    acp_session_id: str
    agent: Agent
    broker: Broker
    deadline: float
    allow_always: bool = False
    #: How long a grant "always allow" gives lasts (seconds; None: as long as the session).
    always_for: float | None = None
    calls: Mapping[str, RuntimeToolCall] = attrs.field(factory=dict)

    #: What the log calls it (``answerer`` of ``approval/decided``).
    answerer_name: ClassVar[str] = "acp"

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        """Ask the client. Cancellation (the question withdrawn): the client's request is
        cancelled with ``$/cancel_request``; its late answer is dropped."""
        if req.agent is not self.agent or req.call_id is None:
            return await next_()
        offer = always_offer(req) if self.allow_always else None
        project = self.broker.project_rules if offer else None
        options = (
            ALLOW_ONCE,
            REJECT_ONCE,
            *((always_option(offer, self.always_for),) if offer else ()),
            *((project_option(offer, project),) if offer and project else ()),
        )
        params = to_wire(
            RequestPermissionRequest(
                session_id=self.acp_session_id,
                tool_call=permission_tool_call(req.call_id, req, self.calls.get(req.call_id)),
                options=options,
            )
        )
        raw: object = None
        # connection.request() always checkpoints (it queues a frame and waits for the answer).
        with trio.move_on_after(self.deadline) as timer:  # noqa: ASYNC912
            try:
                raw = await self.connection.request(AcpMethod.SESSION_REQUEST_PERMISSION, params)
            except JsonRpcError as exc:
                log.info("client refused the permission request (%s): unavailable", exc)
                return Outcome.UNAVAILABLE  # noqa: ASYNC910 (request() checkpointed)
            except ConnectionClosed as exc:
                log.info("connection closed while asking (%s): unavailable", exc.reason)
                return Outcome.UNAVAILABLE  # noqa: ASYNC910 (request() checkpointed)
        if timer.cancelled_caught:
            log.warning(
                "no answer to the permission request for %s within %gs: unavailable",
                req.call_id,
                self.deadline,
            )
            return Answer(outcome=Outcome.UNAVAILABLE, expired=True)
        try:
            answer = from_wire(RequestPermissionResponse, raw)
        except WireDecodeError as exc:
            log.warning("malformed permission answer (%s): unavailable", exc)
            return Outcome.UNAVAILABLE
        outcome = answer.outcome
        if isinstance(outcome, CancelledPermissionOutcome):
            return Outcome.CANCELLED
        if outcome.option_id == ALLOW_ONCE.option_id:
            return Outcome.ALLOWED_ONCE
        if offer is not None and outcome.option_id == ALLOW_ALWAYS.option_id:
            await self.broker.remember(
                req.agent,
                req.tool_name,
                command=always_proposal(req),
                by="acp client",
                expires_in=self.always_for,
            )
            return Outcome.ALLOWED_ONCE
        if project is not None and outcome.option_id == ALLOW_ALWAYS_PROJECT.option_id:
            await self.broker.remember(
                req.agent,
                req.tool_name,
                command=always_proposal(req),
                by="acp client",
                scope="project",
            )
            return Outcome.ALLOWED_ONCE
        return Outcome.REJECTED
