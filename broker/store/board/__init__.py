"""The answer board: questions waiting for an answer from another task, process or host, and
the people who may answer them.

- :mod:`._board` — the contract (:class:`AnswerBoard`), a question as it waits
  (:class:`PendingQuestion`), an answer as it travels (:class:`RemoteAnswer`), and the checks
  every implementation applies to what a client sends;
- :mod:`._memory` — :class:`MemoryBoard`, the board of one process (tests, the in-memory store);
- :mod:`._people` — people with personal tokens (kept as SHA-256) and groups;
- :mod:`._quorum` — giving an answer as a person (:func:`answer_question`): approvers,
  two-person approval, and the record of every answer given.

The boards that live in a database are the database's: ``SqliteBoard`` in
:mod:`broker.store.sqlite`, ``PostgresBoard`` in :mod:`broker.store.postgres`; they import
what they share from here. :func:`broker.store.answer_board` opens the board of a store URL.
"""

from __future__ import annotations

from ..._module_metadata import fixup_module_metadata
from ._board import HOW_AUTHENTICATED as HOW_AUTHENTICATED
from ._board import SHOWN_ARGUMENTS as SHOWN_ARGUMENTS
from ._board import AnswerBoard as AnswerBoard
from ._board import AnswerGiven as AnswerGiven
from ._board import AnswerRefusedError as AnswerRefusedError
from ._board import GrantRevocation as GrantRevocation
from ._board import HasAnswerBoard as HasAnswerBoard
from ._board import NotAnApproverError as NotAnApproverError
from ._board import PendingQuestion as PendingQuestion
from ._board import QuestionStatus as QuestionStatus
from ._board import RemoteAnswer as RemoteAnswer
from ._board import UnknownQuestionError as UnknownQuestionError
from ._board import answer_terms as answer_terms
from ._board import check_always as check_always
from ._board import check_answer as check_answer
from ._board import check_by as check_by
from ._board import check_grant_id as check_grant_id
from ._board import check_message as check_message
from ._board import remember_terms as remember_terms
from ._board import settled_from_log as settled_from_log
from ._memory import MemoryBoard as MemoryBoard
from ._memory import refusal as refusal
from ._people import TOKEN_PREFIX as TOKEN_PREFIX
from ._people import PeopleExistsError as PeopleExistsError
from ._people import Person as Person
from ._people import check_group as check_group
from ._people import check_person_name as check_person_name
from ._people import new_token as new_token
from ._people import token_hash as token_hash
from ._quorum import IDENTIFYING as IDENTIFYING
from ._quorum import MAX_GIVEN as MAX_GIVEN
from ._quorum import Answered as Answered
from ._quorum import answer_question as answer_question
from ._quorum import approvals_of as approvals_of

__all__ = [
    "SHOWN_ARGUMENTS",
    "TOKEN_PREFIX",
    "AnswerBoard",
    "AnswerRefusedError",
    "GrantRevocation",
    "HasAnswerBoard",
    "MemoryBoard",
    "NotAnApproverError",
    "PendingQuestion",
    "PeopleExistsError",
    "Person",
    "QuestionStatus",
    "RemoteAnswer",
    "UnknownQuestionError",
    "answer_question",
    "approvals_of",
    "check_group",
    "check_person_name",
    "new_token",
    "token_hash",
]

fixup_module_metadata(__name__, globals())
