"""Objects only a factory makes: ``Broker`` (from :func:`open_broker`) and ``Session`` (from
``broker.open_session``), as trio's ``NoPublicConstructor`` does for its channels.

Synopsis::

    @attrs.define(eq=False)
    class Broker(metaclass=FactoryMade):
        FACTORY = "open_broker() or serve_broker()"

    Broker(...)            # TypeError: broker.Broker is made by open_broker() or serve_broker()
    Broker._create(...)    # what the factory calls

Why: an object built by hand would lack what its factory sets up (a broker's nursery and
timer task, a session's registration with its broker and its actor), and fail later, far from
the mistake. Refusing at once, naming the factory, is the fix in the message.
"""

from __future__ import annotations

from typing import Any, NoReturn, TypeVar

__all__ = ["FactoryMade"]

T = TypeVar("T")


class FactoryMade(type):
    """A metaclass: calling the class raises :class:`TypeError` naming its ``FACTORY``;
    :meth:`_create` makes an instance (for the factory only)."""

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        factory = getattr(cls, "FACTORY", "its factory")
        raise TypeError(
            f"{cls.__name__} has no public constructor: it is made by {factory}; "
            f"use that instead of {cls.__name__}(...)"
        )

    def _create(cls: type[T], *args: Any, **kwargs: Any) -> T:
        """Make an instance, bypassing the refusal (the factory's call)."""
        return type.__call__(cls, *args, **kwargs)  # type: ignore[no-any-return]
