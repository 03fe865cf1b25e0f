"""An answerer's answer: its outcome and who gave it (:class:`Answer`)."""

from __future__ import annotations

import attrs

from ._vocabulary import Outcome

__all__ = ["Answer"]

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

    ``expired`` marks an ``unavailable`` given because the answerer's deadline passed with no
    answer, so the log records a timeout (``source: "deadline"``), never a person's "no".
    """

    outcome: Outcome
    by: str | None = attrs.field(default=None)
    expired: bool = False

    @by.validator
    def _validate_by(self, _attribute: object, value: object) -> None:
        _check_by(value)
