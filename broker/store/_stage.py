"""Staging one commit group on the trio thread: sequence numbers, hash chain, heads, checkpoints.

The writer actor (:mod:`broker.store._writer`) hands :func:`stage_group` the requests it
took from its inbox and the heads they build on — those of the group in flight when there is
one, else the committed ones — and gets back a :class:`Job`: the :class:`Plan` its worker
thread writes as one transaction, whom to answer, and the heads the group leaves behind. A
session's own submission carries the seq it follows and the projection after it, which is
checkpointed as handed (the session folded it once); only a convenience append is folded here.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from .._projection import fold
from ._chain import GENESIS, chain_prefix, chain_rows
from ._checkpoint import PROJECTION_FINGERPRINT, encode_state
from ._heads import EMPTY_HEAD, SessionHead
from ._plan import EMPTY_PLAN, Plan
from ._protocol import StoreError
from ._requests import AppendRequest, CreateRequest, ImportRequest, Request

if TYPE_CHECKING:
    from ._worker_thread import Chained

__all__ = ["Job", "SessionExistsError", "empty_job", "out_of_sequence", "stage_group"]


# SessionHead(seq, hash, state, checkpoint_seq) without its Python __new__: one per durable
# submission.
_head = tuple.__new__


class SessionExistsError(StoreError):
    """An import named a session that already exists; nothing was stored."""


@attrs.define(eq=False, kw_only=True)
class Job:
    """One group's transaction: what it writes, whom it answers, the heads it will commit."""

    plan: Plan
    accepted: list[Request]
    rejected: list[tuple[Request, StoreError]]
    staged: dict[str, SessionHead]
    done: trio.Event = attrs.field(factory=trio.Event, init=False)
    failed: bool = attrs.field(default=False, init=False)
    # The thread did not run it (the group before it failed, or it was dropped): nothing of it
    # was written and none of its requests was answered; GroupWriter._write stages it again.
    skipped: bool = attrs.field(default=False, init=False)
    # Queued on the thread behind the group in flight (WorkerThread.submit(chained=True)).
    chained: Chained | None = attrs.field(default=None, init=False)


def empty_job() -> Job:
    """A job that writes nothing and answers no one."""
    return Job(plan=EMPTY_PLAN, accepted=[], rejected=[], staged={})


def stage_group(
    writes: Sequence[Request],
    *,
    now: int,
    committed: Mapping[str, SessionHead],
    in_flight: Mapping[str, SessionHead],
    prefixes: MutableMapping[str, bytes],
    checkpoint_every: int,
    where: str,
    location: str,
) -> Job:
    """The :class:`Job` of *writes*, built on the heads *in_flight* (the group being written
    now, if any) over the *committed* ones. *prefixes* caches each session's chain prefix;
    *where* and *location* name the store in errors (``store file '…'``; ``…``).
    Pure but for that cache: nothing is written and no request is resolved (hot path)."""
    staged: dict[str, SessionHead] = {}
    bases: dict[str, SessionHead | None] = {}
    creates: list[tuple[str, str | None, int, bytes]] = []
    auto_creates: list[tuple[str, None, int, bytes]] = []
    rows: list[tuple[str, int, int, str, bytes, bytes]] = []
    accepted: list[Request] = []
    rejected: list[tuple[Request, StoreError]] = []
    add_row = rows.append
    for request in writes:
        session_id = request.session_id
        head = staged.get(session_id)
        if head is None:
            if session_id in bases:
                head = bases[session_id]
            else:
                head = in_flight.get(session_id) or committed.get(session_id)
                bases[session_id] = head
        if type(request) is not AppendRequest:  # the hot path is a plain append
            if type(request) is ImportRequest and head is not None:
                error = SessionExistsError(
                    f"session {session_id!r} already exists in {where}: "
                    "import into a new session id"
                )
                rejected.append((request, error))
                continue
            if isinstance(request, CreateRequest | ImportRequest):
                creates.append((session_id, request.parent_id, now, GENESIS))
                head = head or EMPTY_HEAD
        if head is None:
            auto_creates.append((session_id, None, now, GENESIS))
            head = EMPTY_HEAD
        if isinstance(request, AppendRequest):
            seq = head.seq
            given = request.state
            if given is not None and request.seq != seq:
                # Sequenced on top of events that did not land (an earlier group failed):
                # refused, so the session re-reads its head before sequencing again.
                rejected.append((request, out_of_sequence(location, request, seq)))
                continue
            prefix = prefixes.get(session_id)
            if prefix is None:
                prefix = prefixes[session_id] = chain_prefix(session_id)
            seq, prev = chain_rows(session_id, prefix, seq, now, request.lines, head.hash, add_row)
            if given is None:  # a convenience append: the one place the writer folds
                given = head.state
                for event in request.events:
                    given = fold(given, event)
            head = _head(SessionHead, (seq, prev, given, head.checkpoint_seq))
        staged[session_id] = head
        accepted.append(request)
    heads: list[tuple[int, bytes, str]] = []
    checkpoints: list[tuple[str, int, str, str]] = []
    for session_id, head in staged.items():
        before = bases[session_id]
        if head.seq != (0 if before is None else before.seq):
            heads.append((head.seq, head.hash, session_id))
        if checkpoint_every and head.seq - head.checkpoint_seq >= checkpoint_every:
            state_json = encode_state(head.state)
            checkpoints.append((session_id, head.seq, state_json, PROJECTION_FINGERPRINT))
            staged[session_id] = head._replace(checkpoint_seq=head.seq)
    plan = Plan(
        creates=creates,
        auto_creates=auto_creates,
        rows=rows,
        heads=heads,
        checkpoints=checkpoints,
        fault=None,
        ts_ms=now,
    )
    return Job(plan=plan, accepted=accepted, rejected=rejected, staged=staged)


def out_of_sequence(location: str, request: AppendRequest, seq: int) -> StoreError:
    """The refusal of a submission that does not follow its session's log, which ends at *seq*."""
    return StoreError(
        f"session {request.session_id!r} submitted events after seq {request.seq}, but its log "
        f"in '{location}' ends at seq {seq} (an earlier write failed): re-read the head "
        "(store.head) before sequencing again"
    )
