"""An answerer's answer: its outcome and who gave it (:class:`Answer`)."""

from __future__ import annotations

import attrs

from ._vocabulary import Outcome

__all__ = ["MAX_MESSAGE", "Answer", "check_message"]

_MAX_BY = 200
#: The longest message a person may give with an answer (it reaches the model).
MAX_MESSAGE = 2000


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

    ``message`` is what the person said with the answer (``use the staging database``): it is
    recorded in ``approval/decided`` and given to the agent with the outcome, so a refused call's
    result tells the model why (at most :data:`MAX_MESSAGE` characters).
    """

    outcome: Outcome
    by: str | None = attrs.field(default=None)
    expired: bool = False
    message: str | None = attrs.field(default=None)
    #: Every answer given to the question where people answer it (the board): who, how they
    #: were authenticated, counted or refused, ``; ``-separated; recorded in
    #: ``approval/decided`` as ``answers`` when this answer decides.
    answers: str | None = None

    @by.validator
    def _validate_by(self, _attribute: object, value: object) -> None:
        _check_by(value)

    @message.validator
    def _validate_message(self, _attribute: object, value: object) -> None:
        check_message(value)


def check_message(value: object) -> None:
    """ValueError unless *value* is None or a non-empty text of at most :data:`MAX_MESSAGE`."""
    if value is None:
        return
    if (
        type(value) is not str
        or not value.strip()
        or len(value) > MAX_MESSAGE
        or "\x00" in value
        or value.encode("utf-8", "surrogatepass").decode("utf-8", "ignore") != value
    ):
        shown = value[:40] + "…" if isinstance(value, str) and len(value) > 40 else value
        raise ValueError(
            f"message must be a non-empty UTF-8 text of at most {MAX_MESSAGE} characters, "
            f"without NUL (got {shown!r}): say in a sentence why, or pass None"
        )
