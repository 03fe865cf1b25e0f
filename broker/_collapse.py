"""The error rule of every context manager and serve function: the body's exception, unwrapped.

Trio's nurseries are strict: an exception raised in a nursery's body leaves wrapped in an
:class:`ExceptionGroup` even when it is the only one. For a nursery that is an implementation
detail (the broker's root nursery, a session's, the store writer's, a connection's), that wrapper
leaks a detail and breaks ``except ValueError:`` in the caller. Trio's documentation suggests
"unwrap a group of one" at the boundary that owns the hidden nursery; tractor's ``collapse_eg``
does the same. The rule here (``design/architecture.md``, "Errors"):

* a group holding exactly one exception leaves as that exception, itself — ``ValueError`` as
  ``ValueError``, ``KeyboardInterrupt`` as ``KeyboardInterrupt``. Exactly one level is removed:
  the one the hidden nursery added. A group the body raised itself comes out as that group, and
  each hidden nursery on the way out (a session's inside the broker's) removes its own level;
* a group of two or more (the body failed *and* a background task failed) leaves as a group, so
  neither error is lost;
* a group of nothing but :class:`trio.Cancelled` leaves as one ``Cancelled`` (they all mean
  "a scope outside is cancelled"; the scope that catches it needs only one), so
  ``except trio.Cancelled:`` cleanup around a hidden nursery runs;
* nothing else is changed: no exception is ever swallowed or replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["collapse_single", "is_cancellation", "single_exception"]


def is_cancellation(exc: BaseException) -> bool:
    """Whether *exc* is a :class:`trio.Cancelled`, or a group (at any depth) of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(is_cancellation(inner) for inner in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def single_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """What *group* stands for: its one exception (one level down), one ``Cancelled`` when it
    holds only cancellations, or None when it holds several errors."""
    if len(group.exceptions) == 1:
        return group.exceptions[0]
    if is_cancellation(group):
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup):
            leaf = leaf.exceptions[0]
        return leaf
    # One real error beside cancellations (the body failed while a scope outside was cancelled,
    # so the nursery's other tasks raised Cancelled): the error stands for the group. Dropping
    # the Cancelled is safe: the cancelled scope stays cancelled and fires again at the next
    # checkpoint.
    _, rest = group.split(trio.Cancelled)
    if rest is not None and len(rest.exceptions) == 1:
        return rest.exceptions[0]
    return None


@contextmanager
def collapse_single() -> Iterator[None]:
    """``with collapse_single(): async with trio.open_nursery() as n: ...`` — unwrap a lone error.

    Put it outside the nursery it hides. The lone exception keeps its own traceback, cause and
    context; the group it travelled in is not chained onto it, so the hidden nursery's own
    frames are not shown.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaf = single_exception(group)
        if leaf is None:
            raise
        context = leaf.__context__
        try:
            raise leaf
        finally:
            # Raising inside ``except`` chains the group as the context: undo that.
            leaf.__context__ = context
            del leaf, group
