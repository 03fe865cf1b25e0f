"""Session log events (contract §2): frozen values, one class per ``type`` tag.

The wire form ``{"type": ..., "data": {...}}`` with camelCase keys and omitted optional keys is
produced only by :mod:`broker._codec`; feature code builds these classes and never dicts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar, cast

import attrs

from ._vocabulary import Outcome, Policy, Source

__all__ = [
    "AgentMessage",
    "ApprovalAsked",
    "ApprovalDecided",
    "ApprovalGrant",
    "ApprovalPolicy",
    "ApprovalRevoke",
    "Event",
    "SandboxModeSet",
    "ToolCalled",
    "ToolResulted",
    "TurnEnd",
    "TurnEndReason",
    "TurnStart",
    "UserMessage",
]


@attrs.frozen(kw_only=True)
class Event:
    """Base class of every logged event; ``TYPE`` is the wire tag."""

    TYPE: ClassVar[str] = ""


@attrs.frozen(kw_only=True)
class TurnStart(Event):
    """Opens turn number ``turn`` (1-based, per session)."""

    TYPE: ClassVar[str] = "turn/start"
    turn: int


@attrs.frozen(kw_only=True)
class TurnEndReason:
    """Why a turn ended: ``completed``, ``cancelled``, ``error``, ``closed`` or ``interrupted``."""

    kind: str


@attrs.frozen(kw_only=True)
class TurnEnd(Event):
    """Closes turn number ``turn``."""

    TYPE: ClassVar[str] = "turn/end"
    turn: int
    reason: TurnEndReason


@attrs.frozen(kw_only=True)
class ApprovalAsked(Event):
    """A question was put; ``id`` pairs it with exactly one :class:`ApprovalDecided`."""

    TYPE: ClassVar[str] = "approval/asked"
    id: str
    tool_name: str
    call_id: str | None = None
    reason: str | None = None
    #: Beyond: ``sha256:<hex>`` of the arguments the call will run with, when the request
    #: carried them (``argumentsDigest``); the approval is bound to exactly those.
    arguments_digest: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalDecided(Event):
    """The answer to the :class:`ApprovalAsked` with the same ``id``.

    ``remembered`` marks a remembered grant, ``policy`` the ``never`` policy (Beyond), and
    ``recovered`` a crash tail closed by recovery (Beyond, contract §7), ``answered_by`` who
    answered when the deciding answerer named them (Beyond: ``answeredBy``). Each is omitted
    when unset, so the seed's own fields keep their bytes.

    Beyond: ``source`` says what decided (:class:`~broker._vocabulary.Source`): a rule (then
    ``rule_layer``, ``rule_file`` when the rule has one, and ``rule_index``), a grant (then
    ``grant``, the tool it covers), an answerer or an answerer's deadline (then ``answerer``,
    which one), the policy, an abort, the caller's cancellation, the session or turn ending,
    an answerer lost or failing, or the end of the chain (no answerer). ``message``: what the
    person who answered said with it (given to the agent with the outcome). ``answers``: every
    answer people gave to the question on the answer board — the deciding one, each approval
    counted towards a quorum, each refused attempt — with who gave it and how they were
    authenticated, ``; ``-separated (``allowed-once by alice (token); allowed-once by bob
    (inbox-session)``).
    """

    TYPE: ClassVar[str] = "approval/decided"
    id: str
    outcome: Outcome
    remembered: bool = False
    policy: Policy | None = None
    recovered: bool = False
    answered_by: str | None = None
    source: Source | None = None
    rule_layer: str | None = None
    rule_file: str | None = None
    rule_index: int | None = None
    grant: str | None = None
    answerer: str | None = None
    message: str | None = None
    answers: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalPolicy(Event):
    """A durable policy switch; ``source="delegation"`` when seeded into a child session."""

    TYPE: ClassVar[str] = "approval/policy"
    policy: Policy
    source: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalGrant(Event):
    """A remembered grant of ``tool_name`` on this session (and its live descendants).

    The seed's grant is ``{toolName}`` alone: the whole tool, no id. Beyond: a grant given by
    a person or a program has an ``id`` (revocable by it), ``command`` (the command prefix it
    covers; absent: the whole tool), ``by`` (who gave it), ``at_ms`` (when, ms since the epoch)
    and ``expires_at_ms`` (when it stops covering questions; absent: with the session);
    ``rule_file`` the project rules file the answer was also remembered in, as a rule (absent:
    this session only).
    """

    TYPE: ClassVar[str] = "approval/grant"
    tool_name: str
    id: str | None = None
    command: str | None = None
    by: str | None = None
    at_ms: int | None = None
    expires_at_ms: int | None = None
    rule_file: str | None = None


@attrs.frozen(kw_only=True)
class ApprovalRevoke(Event):
    """A grant taken back (Beyond): by ``id``, or the seed's id-less grant by ``tool_name``.

    ``expired`` marks a grant whose expiry passed (recorded when a question first found it
    expired); ``by`` who revoked it.
    """

    TYPE: ClassVar[str] = "approval/revoke"
    id: str | None = None
    tool_name: str | None = None
    by: str | None = None
    expired: bool = False


@attrs.frozen(kw_only=True)
class UserMessage(Event):
    """What the user said to open a turn (or a notice delivered as a sourced user message)."""

    TYPE: ClassVar[str] = "user/message"
    text: str
    source: str | None = None


@attrs.frozen(kw_only=True)
class AgentMessage(Event):
    """Text the model produced in a step."""

    TYPE: ClassVar[str] = "agent/message"
    text: str


@attrs.frozen(kw_only=True)
class ToolCalled(Event):
    """The model asked to run a tool; precedes any approval pair of that call.

    ``same_step`` marks a call the model asked for in the same step as the call logged before it
    (one model message with several tool calls), so a loaded session rebuilds that message as
    it was; omitted when unset, so a step's first call keeps the seed's byte-identical line.
    """

    TYPE: ClassVar[str] = "tool/call"
    call_id: str
    tool_name: str
    input: dict[str, Any]
    same_step: bool = False


@attrs.frozen(kw_only=True)
class ToolResulted(Event):
    """What the model was told a tool call produced.

    ``is_error`` marks ``Error: …`` results (a denial, a tool error); ``failed`` a call that ran
    but did not succeed (a non-zero exit, a time limit), whose output is shown as is. Both are
    omitted when unset. A front end shows either as a failed call, live and on replay.
    """

    TYPE: ClassVar[str] = "tool/result"
    call_id: str
    output: str
    is_error: bool = False
    failed: bool = False


@attrs.frozen(kw_only=True)
class SandboxModeSet(Event):
    """A per-session override of the composition's default sandbox mode."""

    TYPE: ClassVar[str] = "sandbox/mode"
    mode: str


# -- positional makers --------------------------------------------------------------------------
#
# A frozen, slotted attrs class's ``__init__`` matches keywords (kw_only), fills in defaults and
# stores each field through ``object.__setattr__``: about twice what storing the fields costs.
# :func:`maker` generates, once per class, a function that takes every field positionally, in
# field order, and stores each through its slot directly; what it makes is equal to, and
# indistinguishable from, what ``__init__`` makes with the same values. (A class that is not
# frozen gets plain attribute stores, as its ``__init__`` does: only the keyword matching and
# the defaults are saved.) For the few values made on every question: its events, the
# projection, its decision, a durable submission.

T = TypeVar("T")


def maker(cls: type[T], order: str) -> Callable[..., T]:
    """``make(v1, v2, ...)``: an instance of *cls* with every field given, in field order.

    *order* names the fields, space-separated, as the caller passes them: a ValueError unless it
    is exactly *cls*'s field order (a field added or moved fails at import, never silently).

    Only for a slotted attrs class whose ``__init__`` just stores its arguments (no validator,
    converter, ``init=False`` field or post-init hook; a default, a factory's too, is the
    caller's to pass): refused with a ValueError otherwise, so a class that gains one cannot be
    made past it.
    """
    fields = attrs.fields(cast(Any, cls))
    plain = all(
        f.init and f.validator is None and f.converter is None and f.alias == f.name.lstrip("_")
        for f in fields
    )
    slots = vars(cls).get("__slots__", ())
    if (
        not plain
        or not slots
        or "_attrs_cached_hash" in slots
        or hasattr(cls, "__attrs_post_init__")
    ):
        raise ValueError(
            f"{cls.__name__} is not a plain slotted attrs class: make it with __init__"
        )
    names = [f.name for f in fields]
    if order.split() != names:
        raise ValueError(f"{cls.__name__}'s fields are, in order: {' '.join(names)}")
    arguments = ", ".join(f"v{i}" for i in range(len(names)))
    if cls.__setattr__ is object.__setattr__:
        # Not frozen: plain attribute stores, as its __init__ does.
        setters: list[object] = []
        stores = [f"        self.{name} = v{i}" for i, name in enumerate(names)]
    else:
        setters = [getattr(cls, name).__set__ for name in names]
        stores = [f"        s{i}(self, v{i})" for i in range(len(names))]
    lines = [
        f"def factory(_new, _cls, {', '.join(f's{i}' for i in range(len(setters)))}):",
        f"    def make({arguments}):",
        "        self = _new(_cls)",
        *stores,
        "        return self",
        "    return make",
    ]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<maker of {cls.__name__}>", "exec"), namespace)
    make: Callable[..., T] = namespace["factory"](object.__new__, cls, *setters)
    return make
