"""Event stores: the protocol, the in-memory store, and the durable stores.

The store-neutral parts — the group-commit writer (:mod:`._writer`), staging with the hash
chain and checkpoints (:mod:`._stage`, :mod:`._chain`, :mod:`._checkpoint`), tickets and
requests (:mod:`._requests`), recovery (:mod:`._recovery`) — live here; each durable
store adds its SQL and connection in its own folder: :mod:`broker.store.sqlite`,
:mod:`broker.store.postgres`. :func:`open_store` opens the one a URL names.
"""

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._boards import answer_board as answer_board
from ._boards import board_for as board_for
from ._describe import describe_entry as describe_entry
from ._describe import seconds as seconds
from ._forwarding import ForwardingStore as ForwardingStore
from ._grant_list import GrantRow as GrantRow
from ._grant_list import list_grants as list_grants
from ._invariants import SessionChecker as SessionChecker
from ._logtools import ImportLineError as ImportLineError
from ._logtools import LogToolError as LogToolError
from ._logtools import SessionSummary as SessionSummary
from ._logtools import Timeline as Timeline
from ._logtools import VerifyError as VerifyError
from ._logtools import export_all as export_all
from ._logtools import import_file as import_file
from ._logtools import list_sessions as list_sessions
from ._logtools import open_reader as open_reader
from ._logtools import session_lines as session_lines
from ._logtools import show_session as show_session
from ._logtools import verify_reader as verify_reader
from ._logtools import verify_store as verify_store
from ._memory import MemoryStore as MemoryStore
from ._open import open_store as open_store
from ._protocol import Durability as Durability
from ._protocol import EventStore as EventStore
from ._protocol import SessionFencedError as SessionFencedError
from ._protocol import SessionOwnedError as SessionOwnedError
from ._protocol import SessionRecord as SessionRecord
from ._protocol import StoreError as StoreError
from ._protocol import StoreLockedError as StoreLockedError
from ._protocol import StoreOpenError as StoreOpenError
from ._recovery import RecoveredSession as RecoveredSession
from ._recovery import RecoveryReport as RecoveryReport
from ._recovery import recovery_events as recovery_events
from ._requests import Ticket as Ticket
from ._rows import EventRow as EventRow
from ._rows import SessionInfo as SessionInfo
from ._rows import StoredCheckpoint as StoredCheckpoint
from ._rows import StoreReader as StoreReader
from ._stage import SessionExistsError as SessionExistsError
from ._url import ACCEPTED_STORE_FORMS as ACCEPTED_STORE_FORMS
from ._url import PostgresUrl as PostgresUrl
from ._url import SqliteUrl as SqliteUrl
from ._url import StoreUrlError as StoreUrlError
from ._url import parse_store_url as parse_store_url
from ._url import redact_dsn as redact_dsn
from .board import HOW_AUTHENTICATED as HOW_AUTHENTICATED
from .board import IDENTIFYING as IDENTIFYING
from .board import SHOWN_ARGUMENTS as SHOWN_ARGUMENTS
from .board import TOKEN_PREFIX as TOKEN_PREFIX
from .board import AnswerBoard as AnswerBoard
from .board import Answered as Answered
from .board import AnswerGiven as AnswerGiven
from .board import AnswerRefusedError as AnswerRefusedError
from .board import GrantRevocation as GrantRevocation
from .board import HasAnswerBoard as HasAnswerBoard
from .board import MemoryBoard as MemoryBoard
from .board import NotAnApproverError as NotAnApproverError
from .board import PendingQuestion as PendingQuestion
from .board import PeopleExistsError as PeopleExistsError
from .board import Person as Person
from .board import QuestionStatus as QuestionStatus
from .board import RemoteAnswer as RemoteAnswer
from .board import UnknownQuestionError as UnknownQuestionError
from .board import answer_question as answer_question
from .board import approvals_of as approvals_of
from .board import check_answer as check_answer
from .board import check_by as check_by
from .board import check_grant_id as check_grant_id
from .board import check_group as check_group
from .board import check_person_name as check_person_name
from .board import new_token as new_token
from .board import token_hash as token_hash
from .postgres import open_postgres_store as open_postgres_store
from .sqlite import SqliteStore as SqliteStore
from .sqlite import open_sqlite_reader as open_sqlite_reader
from .sqlite import open_sqlite_store as open_sqlite_store

__all__ = [
    "EventStore",
    "MemoryStore",
    "RecoveredSession",
    "RecoveryReport",
    "SessionFencedError",
    "SessionOwnedError",
    "SqliteStore",
    "StoreError",
    "StoreLockedError",
    "StoreOpenError",
    "StoreUrlError",
    "open_postgres_store",
    "open_sqlite_reader",
    "open_sqlite_store",
    "open_store",
    "parse_store_url",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
