"""What each session's next submission must follow, kept by a store's writer actor.

A session's submission (the one append path) carries the seq its events follow. The writer
refuses at once, without queueing, one that cannot land: a session another process took over
(fenced), or a seq that does not follow what was already handed over for the session. After a
failed append a session is *adrift*: what was handed over after the failure may not land, so
its next seq is unknown until its owner re-reads the head; meanwhile submissions are queued
unchecked and staging refuses those that do not follow the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from ._requests import AppendRequest
from ._stage import out_of_sequence

if TYPE_CHECKING:
    from ._heads import SessionHead
    from ._protocol import StoreError
    from ._requests import Request

__all__ = ["SubmissionLedger"]


@attrs.define(eq=False)
class SubmissionLedger:
    """Per-session expectations of the writer's submissions. Only the actor's trio thread
    touches it. *heads* is the writer's committed heads (the ledger drops a fenced session's)."""

    heads: dict[str, SessionHead]
    #: Where the store is, as refusals name it.
    location: str
    # The seq the next submission of a session must follow: what was handed over for it so far
    # (set at every hand-over of an append). Absent: its committed head.
    _next_seq: dict[str, int] = attrs.field(factory=dict, init=False)
    # Sessions an append of which failed (module docstring).
    _adrift: set[str] = attrs.field(factory=set, init=False)
    #: Sessions another process took over (a shared store fenced a write of theirs, or found
    #: their lease taken at renewal), with the error every later submission of theirs gets at
    #: once. A claim in this process takes one back. Empty on the hot path: test it first.
    fenced: dict[str, StoreError] = attrs.field(factory=dict, init=False)

    def refusal(self, request: AppendRequest) -> StoreError | None:
        """Why *request* must be refused before it is queued, or None."""
        if self.fenced:
            fenced = self.fenced.get(request.session_id)
            if fenced is not None:
                return fenced
        expected = self._expected_seq(request.session_id)
        if expected is not None and request.seq is not None and request.seq != expected:
            return out_of_sequence(self.location, request, expected)
        return None

    def handed_over(self, request: AppendRequest) -> None:
        """*request* was queued: the session's next submission follows it."""
        expected = self._expected_seq(request.session_id)
        if expected is not None:
            self._next_seq[request.session_id] = expected + len(request.lines)

    def _expected_seq(self, session_id: str) -> int | None:
        """The seq *session_id*'s next submission must follow; None while it is adrift."""
        if session_id in self._adrift:
            return None
        seq = self._next_seq.get(session_id)
        if seq is None:
            head = self.heads.get(session_id)
            seq = 0 if head is None else head.seq
        return seq

    def refuse(self, request: Request, error: StoreError) -> None:
        """Fail *request*; after a failed append, its session is adrift."""
        if isinstance(request, AppendRequest):
            self._next_seq.pop(request.session_id, None)
            self._adrift.add(request.session_id)
        request.fail(error)

    def head_read(self, session_id: str) -> None:
        """Everything handed over before a head request is settled and its owner sequences
        from the head it is about to get: *session_id* is no longer adrift."""
        if session_id in self._adrift:
            self._adrift.discard(session_id)
            self._next_seq.pop(session_id, None)

    def claimed(self, session_id: str) -> None:
        """This process took *session_id* (back): it follows its freshly read head."""
        self.fenced.pop(session_id, None)
        self._next_seq.pop(session_id, None)
        self._adrift.discard(session_id)

    def fence(self, fenced: Mapping[str, StoreError]) -> None:
        """Another process owns *fenced* now: forget their heads, refuse their writes."""
        for session_id, error in fenced.items():
            self.heads.pop(session_id, None)
            self.fenced[session_id] = error

    def unfenced(self, writes: Sequence[Request]) -> list[Request]:
        """*writes* but those of fenced sessions (queued before the fence was known), which are
        refused with their session's fence."""
        kept = []
        for request in writes:
            fenced = self.fenced.get(request.session_id)
            if fenced is None:
                kept.append(request)
            else:
                self.refuse(request, fenced)
        return kept
