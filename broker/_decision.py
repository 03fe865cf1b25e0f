"""The full answer to one question: its outcome and how it was reached."""

from __future__ import annotations

import attrs

from ._vocabulary import Outcome

__all__ = ["Decision"]


@attrs.frozen(kw_only=True)
class Decision:
    """What :meth:`Broker.request_decision` returns; ``request()`` returns ``outcome`` alone.

    ``id`` is the audit pair's id; ``remembered`` marks a remembered grant; ``by_policy`` a
    rejection by the ``never`` policy (no answerer was consulted).
    """

    id: str
    outcome: Outcome
    remembered: bool = False
    by_policy: bool = False
