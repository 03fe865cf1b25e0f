"""A writer's per-session head, and how it is rebuilt from a checkpoint plus the tail of the log.

Store-neutral: each store reads its rows its own way (:mod:`broker.store.sqlite._load`,
:mod:`broker.store.postgres`) and hands them to :func:`fold_session`. Reopening costs one
checkpoint decode plus a fold of the events after it per session, so it grows with the number
of sessions (and ``checkpoint_every``), not with the length of the logs. The hash chain is *not*
re-verified here (that is O(events)); ``broker log verify`` does it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from .._codec import EventDecodeError, decode_event
from .._projection import ApprovalState, fold
from ._chain import GENESIS
from ._checkpoint import CheckpointDecodeError, decode_state
from ._protocol import StoreOpenError

__all__ = ["EMPTY_HEAD", "SessionHead", "fold_session", "order_pending"]

log = logging.getLogger("broker.store")


class SessionHead(NamedTuple):
    """A writer's view of one session: chain head, folded state, last checkpoint seq.

    Invariant: ``state.events == seq`` (one fold per stored row).

    A named tuple, not an attrs class: staging makes one per durable submission, and a frozen
    attrs instance costs three times as much to build (every field through
    ``object.__setattr__``). Immutable either way; ``_replace`` makes a changed copy.
    """

    seq: int
    hash: bytes
    state: ApprovalState
    checkpoint_seq: int


EMPTY_HEAD = SessionHead(seq=0, hash=GENESIS, state=ApprovalState(), checkpoint_seq=0)


def fold_session(
    where: str,
    session_id: str,
    head_seq: int,
    head_hash: bytes,
    checkpoint: tuple[int, str] | None,
    tail: Callable[[int], Iterable[tuple[int, str, bytes]]],
    damaged: Callable[[str, str], StoreOpenError],
) -> SessionHead:
    """Fold *session_id* from its *checkpoint* (``(seq, state json)`` or None) and its tail:
    ``tail(after_seq)`` yields the ``(seq, line, hash)`` rows after *after_seq* in seq order.

    A checkpoint that is unreadable or does not fit the log is ignored with a warning (the
    events are authoritative). A gap, an undecodable line or a tail that does not end at the
    recorded head raises ``damaged(session_id, what)``. *where* names the store in warnings.
    """
    state = ApprovalState()
    checkpoint_seq = 0
    if checkpoint is not None:
        checkpoint_seq, text = checkpoint
        problem: str | None = None
        try:
            state = decode_state(text)
        except CheckpointDecodeError as exc:
            problem = f"is unreadable ({exc})"
        else:
            if state.events != checkpoint_seq or checkpoint_seq > head_seq:
                problem = (
                    f"does not fit its log (folds {state.events} events, head is seq {head_seq})"
                )
        if problem is not None:
            # The events are authoritative and the checkpoint only a cache: rebuild from them.
            log.warning(
                "%s: session %r: the checkpoint at seq %d %s; rebuilding the "
                "session's projection from its events",
                where,
                session_id,
                checkpoint_seq,
                problem,
            )
            state, checkpoint_seq = ApprovalState(), 0
    last_seq, last_hash = checkpoint_seq, None
    for seq, line, digest in tail(checkpoint_seq):
        if seq != last_seq + 1:
            raise damaged(session_id, f"has seq {seq} after seq {last_seq}")
        try:
            state = fold(state, decode_event(line))
        except EventDecodeError as exc:
            raise damaged(session_id, f"seq {seq} is not a valid event ({exc})") from exc
        last_seq, last_hash = seq, digest
    if last_seq != head_seq or (last_hash is not None and last_hash != head_hash):
        raise damaged(session_id, f"ends at seq {last_seq} but its recorded head is seq {head_seq}")
    return SessionHead(seq=head_seq, hash=head_hash, state=state, checkpoint_seq=checkpoint_seq)


def order_pending(asked_in_log_order: Iterable[str], pending: frozenset[str]) -> list[str]:
    """*pending* ask ids ordered by the seq of their ``approval/asked`` (*asked_in_log_order*:
    the ids of a session's asks, in log order); ids not among them come last, sorted."""
    ordered = list(dict.fromkeys(ask_id for ask_id in asked_in_log_order if ask_id in pending))
    return ordered + sorted(pending - set(ordered))
