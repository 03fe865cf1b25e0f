"""Reading a stored session back for resume: look it up, take it, check it, refold it.

The broker reserves the id and builds the :class:`~broker._session.Session`; this module does
the store's part, which needs nothing of the broker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._errors import ResumeError, SessionNotStoredError
from ._projection import fold_all
from .store import SessionOwnedError, StoreError

if TYPE_CHECKING:
    from ._projection import ApprovalState
    from .store import EventStore, SessionRecord

__all__ = ["check_resume_id", "take_for_resume"]

log = logging.getLogger("broker")


def check_resume_id(resume: object) -> str:
    """*resume* as a session id, or :class:`TypeError` naming the parameter."""
    if not isinstance(resume, str) or not resume:
        raise TypeError(
            f"resume must be a session id string, got {resume!r}: pass the id of a "
            "session this broker's store holds"
        )
    return resume


async def take_for_resume(
    store: EventStore, session_id: str, where: str
) -> tuple[SessionRecord, ApprovalState]:
    """Take *session_id* from *store* (named *where* in errors) to resume it here: its record
    and the projection folded from its events.

    Raises :class:`ResumeError` for a session the store does not hold, one it cannot claim, or
    one left with an open turn or undecided questions (not recovered);
    :class:`~broker.store.SessionOwnedError` (naming the owner and when its lease expires) for a
    session another process holds. Cancellation: the claim may still land (the session is then
    this process's until its lease expires or it is released).
    """
    record = await store.lookup(session_id)
    if record is None:
        raise SessionNotStoredError(
            f"session {session_id!r} is not in {where}: pass the id of a session it holds "
            "(broker log show STORE lists them)"
        )
    try:
        head = await store.claim(session_id)
    except SessionOwnedError:
        raise  # names the owner and when its lease expires
    except StoreError as exc:
        raise ResumeError(f"cannot resume session {session_id!r} from {where}: {exc}") from exc
    state = head.state
    if state.turn_open or state.pending:
        raise ResumeError(
            f"session {session_id!r} in {where} has an open turn or undecided questions: it "
            "was not closed cleanly and has not been recovered; reopen the store (recovery "
            "runs at open) and resume it then"
        )
    # The events are authoritative; a checkpoint is a cache. Refold them once per resume, so a
    # checkpoint whose content was altered (the count still fitting) is not trusted.
    folded = fold_all(await store.read(session_id))
    if folded != state:
        log.warning(
            "session %r in %s: its checkpointed projection disagrees with its events; "
            "resuming from the events",
            session_id,
            where,
        )
        state = folded
    return record, state
