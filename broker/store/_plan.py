"""What one commit group writes: the :class:`Plan` a writer stages on the trio thread and its
store's backend writes as ONE transaction (:mod:`broker.store._backend`).

Store-neutral: rows, heads and checkpoints as plain tuples; how they become SQL is the
backend's business.
"""

from __future__ import annotations

import attrs

__all__ = ["EMPTY_PLAN", "Plan"]


@attrs.frozen(kw_only=True)
class Plan:
    """Everything one group writes, prepared on the trio thread.

    Invariant: written all or nothing, in one transaction.
    """

    #: ``(session_id, parent_id, created_ms, genesis hash)``: create, or update the parent.
    creates: list[tuple[str, str | None, int, bytes]]
    #: ``(session_id, None, created_ms, genesis hash)``: create unless it exists.
    auto_creates: list[tuple[str, None, int, bytes]]
    #: ``(session_id, seq, ts_ms, line, prev_hash, hash)`` in append order.
    rows: list[tuple[str, int, int, str, bytes, bytes]]
    #: ``(head_seq, head_hash, session_id)`` of every session whose head moved.
    heads: list[tuple[int, bytes, str]]
    #: ``(session_id, seq, state json, projection fingerprint)``: upserted.
    checkpoints: list[tuple[str, int, str, str]]
    #: The test seam: raised in place of COMMIT (the group is rolled back) ...
    fault: Exception | None
    #: ... or after COMMIT (the group landed, yet is reported as failed).
    fault_landed: bool = False
    ts_ms: int = 0


EMPTY_PLAN = Plan(creates=[], auto_creates=[], rows=[], heads=[], checkpoints=[], fault=None)
