"""The broker's exceptions. Every message is lower-case, names the rule, and suggests the fix.

The whole tree, in one place (where each lives in brackets; what to catch is the left-most name
that covers your case — ``BrokerError`` covers everything the package raises on purpose)::

    BrokerError
    ├── TurnError                        a question or turn outside/inside an open turn
    ├── SessionClosedError               the session is closing or closed
    │   └── SessionCrashedError          its actor failed
    ├── BrokerClosedError                the broker is shutting down
    ├── AuditAppendError                 an audit event could not be made durable
    │   └── AuditInvariantError          an event that would break an audit rule was refused
    ├── ResumeError                      a stored session cannot be resumed
    │   └── SessionNotStoredError        the store holds no session of that id
    ├── EventDecodeError (ValueError)    a log line is not an event          [_codec]
    ├── CompositionError (ValueError)    a bad ``broker acp`` setting        [_composition]
    ├── ScenarioError (ValueError)       a bad scenario file                 [agent]
    ├── ScenarioMismatchError (AssertionError)  a scripted model saw the unexpected  [agent]
    ├── HookSettingsError (ValueError)   a bad Claude Code settings file     [hooks]
    ├── RulesFileError (ValueError)      a rules file refused, every problem named  [rules]
    ├── StoreUrlError (ValueError)       a store URL of no accepted form     [store]
    ├── CheckpointDecodeError (ValueError)  a stored checkpoint is malformed [store]
    ├── StoreError                       the store failed                    [store]
    │   ├── StoreOpenError               it cannot be opened
    │   │   └── StoreLockedError         another process holds its writer
    │   ├── SessionFencedError           this process lost the session's lease
    │   ├── SessionOwnedError            another process holds the session
    │   ├── SessionExistsError           a session id is taken
    │   └── ConnectionLost               the database connection dropped
    │       └── LeasesLost               ... for longer than the leases live
    ├── PeopleExistsError (ValueError)   a person of that name is registered  [store]
    ├── AnswerRefusedError               an answer from elsewhere was not taken  [store]
    │   ├── UnknownQuestionError         no such question was put up
    │   └── NotAnApproverError           not among its approvers, or approving twice
    ├── LogToolError                     ``broker log`` cannot do it          [store]
    │   ├── VerifyError                  a verify found violations
    │   └── ImportLineError              an imported line is not an event
    ├── JsonRpcError                     the ACP peer answered with an error  [acp]
    ├── ConnectionClosed                 the ACP connection ended             [acp]
    ├── WireDecodeError (ValueError)     an ACP message of the wrong shape    [acp]
    ├── SocketError (OSError)            broker serve cannot listen there     [serve]
    ├── SandboxUnavailableError (RuntimeError)  no sandbox on this host     [tools]
    └── SeccompUnsupportedError (RuntimeError)  no seccomp filter here      [tools]

    Not BrokerError (the standard types, for what is a plain mistake):
    GlobError (ValueError)               a bad glob in a rule                [rules]
    InboxListenError (OSError)           the inbox cannot listen             [inbox]
    FrameError, ParamError (ValueError)  an MCP frame or parameter is malformed  [mcp]
    FrameError (ValueError)              not a question on broker serve's socket  [serve]
    ValueError / TypeError               a bad argument, named with its fix

Internal, never leaving their module: ``StructureProblem``, ``FeedBusyError``,
``BodyTooLargeError``, ``HttpError``, ``TooLong``, ``JobSkipped``, ``CliError`` (the CLI's
one-line refusal).
"""

from __future__ import annotations

__all__ = [
    "AuditAppendError",
    "AuditInvariantError",
    "BrokerClosedError",
    "BrokerError",
    "ResumeError",
    "SessionClosedError",
    "SessionCrashedError",
    "SessionNotStoredError",
    "TurnError",
]


class BrokerError(Exception):
    """Base class of the errors this package raises on purpose."""


class TurnError(BrokerError):
    """An operation needs an open turn (or no open turn) and the session is in the other state."""


class SessionClosedError(BrokerError):
    """The session is closing or closed: it takes no new questions, turns or grants."""


class SessionCrashedError(SessionClosedError):
    """The session's actor failed; its pending questions are left for recovery."""


class BrokerClosedError(BrokerError):
    """The broker is shutting down or shut down."""


class AuditAppendError(BrokerError):
    """An audit event could not be made durable; the request that needed it made no decision."""


class AuditInvariantError(AuditAppendError):
    """The session refused to commit an event that would break an audit rule of its log.

    The message names the rule (as ``broker log verify`` does). Nothing was appended.
    """


class ResumeError(BrokerError):
    """A stored session cannot be resumed: unknown, already open here, or not recovered."""


class SessionNotStoredError(ResumeError):
    """The store holds no session of that id (a caller that maps outside ids onto sessions
    opens a new one then: ``start_session(session_id=...)``)."""
