"""The full answer to one question: its outcome and how it was reached."""

from __future__ import annotations

import attrs

from ._vocabulary import Outcome

__all__ = ["Answer", "Decision"]

_MAX_BY = 200


def _check_by(value: object) -> None:
    if value is None:
        return
    if type(value) is not str or not value.strip() or len(value) > _MAX_BY:
        raise ValueError(
            f"by must be a non-empty name of at most {_MAX_BY} characters (got {value!r}): "
            "pass who answered, e.g. by='alice', or None"
        )


@attrs.frozen(kw_only=True)
class Answer:
    """An answerer's outcome with who gave it: ``return Answer(outcome=..., by="alice")``.

    An answerer may return a bare :class:`Outcome` instead. ``by`` lands in ``approval/decided``
    as ``answeredBy`` when this answer decides the question; it is recorded, never trusted for
    anything else (it names, it does not authenticate).
    """

    outcome: Outcome
    by: str | None = attrs.field(default=None)

    @by.validator
    def _validate_by(self, _attribute: object, value: object) -> None:
        _check_by(value)


@attrs.frozen(kw_only=True)
class Decision:
    """What :meth:`Broker.request_decision` returns; ``request()`` returns ``outcome`` alone.

    ``id`` is the audit pair's id; ``remembered`` marks a remembered grant; ``by_policy`` a
    rejection by the ``never`` policy (no answerer was consulted); ``answered_by`` who answered,
    when the deciding answerer said so (:class:`Answer`).
    """

    id: str
    outcome: Outcome
    remembered: bool = False
    by_policy: bool = False
    answered_by: str | None = None
