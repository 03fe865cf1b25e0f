"""broker: a fail-closed approval broker for AI agents, on trio.

Every question "may this agent run this tool, once, now?" resolves to exactly one
:class:`Outcome` — ``allowed-once``, ``rejected``, ``cancelled`` or ``unavailable`` — with an
``approval/asked`` + ``approval/decided`` audit pair in the session's durable log.

What it promises is ``design/contract.md`` in the repository (docstrings cite its sections as
"contract §3"); the exceptions it raises are mapped in one place, :mod:`broker._errors`.
"""

from __future__ import annotations

__version__ = "0.1.0"

from ._agent import Agent as Agent
from ._agent import Notice as Notice
from ._answerers import AnswererHandle as AnswererHandle
from ._answerers import AnswerFn as AnswerFn
from ._answerers import AnswerNext as AnswerNext
from ._broker import Broker as Broker
from ._broker import open_broker as open_broker
from ._broker import serve_broker as serve_broker
from ._codec import EventDecodeError as EventDecodeError
from ._codec import decode_event as decode_event
from ._codec import encode_event as encode_event
from ._decision import Answer as Answer
from ._errors import AuditAppendError as AuditAppendError
from ._errors import AuditInvariantError as AuditInvariantError
from ._errors import BrokerClosedError as BrokerClosedError
from ._errors import BrokerError as BrokerError
from ._errors import ResumeError as ResumeError
from ._errors import SessionClosedError as SessionClosedError
from ._errors import SessionCrashedError as SessionCrashedError
from ._errors import SessionNotStoredError as SessionNotStoredError
from ._errors import TurnError as TurnError
from ._events import AgentMessage as AgentMessage
from ._events import ApprovalAsked as ApprovalAsked
from ._events import ApprovalDecided as ApprovalDecided
from ._events import ApprovalGrant as ApprovalGrant
from ._events import ApprovalPolicy as ApprovalPolicy
from ._events import ApprovalRevoke as ApprovalRevoke
from ._events import Event as Event
from ._events import SandboxModeSet as SandboxModeSet
from ._events import ToolCalled as ToolCalled
from ._events import ToolResulted as ToolResulted
from ._events import TurnEnd as TurnEnd
from ._events import TurnEndReason as TurnEndReason
from ._events import TurnStart as TurnStart
from ._events import UserMessage as UserMessage
from ._first_answer import first_answer as first_answer
from ._projection import ApprovalState as ApprovalState
from ._questions import Decision as Decision
from ._remote import RemoteAnswerer as RemoteAnswerer
from ._request import ApprovalRequest as ApprovalRequest
from ._session import Session as Session
from ._signal import AbortSignal as AbortSignal
from ._vocabulary import Delegation as Delegation
from ._vocabulary import Outcome as Outcome
from ._vocabulary import Policy as Policy
from ._vocabulary import Source as Source
from .store import AnswerBoard as AnswerBoard
from .store import AnswerRefusedError as AnswerRefusedError
from .store import EventStore as EventStore
from .store import MemoryBoard as MemoryBoard
from .store import MemoryStore as MemoryStore
from .store import PendingQuestion as PendingQuestion
from .store import RemoteAnswer as RemoteAnswer
from .store import SessionFencedError as SessionFencedError
from .store import SessionOwnedError as SessionOwnedError
from .store import SessionRecord as SessionRecord
from .store import StoreError as StoreError
from .store import UnknownQuestionError as UnknownQuestionError
from .store import answer_board as answer_board

# Explicit: what a user may import from the package (subpackages are imported by name).
__all__ = [
    "AbortSignal",
    "Agent",
    "AgentMessage",
    "Answer",
    "AnswerBoard",
    "AnswerFn",
    "AnswerNext",
    "AnswerRefusedError",
    "AnswererHandle",
    "ApprovalAsked",
    "ApprovalDecided",
    "ApprovalGrant",
    "ApprovalPolicy",
    "ApprovalRequest",
    "ApprovalRevoke",
    "ApprovalState",
    "AuditAppendError",
    "AuditInvariantError",
    "Broker",
    "BrokerClosedError",
    "BrokerError",
    "Decision",
    "Delegation",
    "Event",
    "EventDecodeError",
    "EventStore",
    "MemoryBoard",
    "MemoryStore",
    "Notice",
    "Outcome",
    "PendingQuestion",
    "Policy",
    "RemoteAnswer",
    "RemoteAnswerer",
    "ResumeError",
    "SandboxModeSet",
    "Session",
    "SessionClosedError",
    "SessionCrashedError",
    "SessionFencedError",
    "SessionNotStoredError",
    "SessionOwnedError",
    "SessionRecord",
    "Source",
    "StoreError",
    "ToolCalled",
    "ToolResulted",
    "TurnEnd",
    "TurnEndReason",
    "TurnError",
    "TurnStart",
    "UnknownQuestionError",
    "UserMessage",
    "answer_board",
    "decode_event",
    "encode_event",
    "first_answer",
    "open_broker",
    "serve_broker",
]

from ._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
