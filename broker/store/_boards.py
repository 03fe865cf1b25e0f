"""The answer board of a store named by its URL, without opening the store's writer.

Synopsis::

    board = board_for("logs/sessions.sqlite")    # or sqlite:///…, postgresql://…
    await board.pending()

What ``broker pending`` and ``broker answer`` use: they run beside the asking process, which
owns the store's writer, and touch only the board.
"""

from __future__ import annotations

import os

from ._url import PostgresUrl, parse_store_url
from .board import AnswerBoard
from .sqlite import SqliteBoard

__all__ = ["answer_board", "board_for"]


def board_for(store: str | os.PathLike[str], *, parameter: str = "store") -> AnswerBoard:
    """The board of the store *store* names (a path, ``sqlite:///…`` or ``postgresql://…``).

    Raises :class:`~broker.store._url.StoreUrlError` for any other form. Nothing is opened
    until the board is used.
    """
    where = parse_store_url(store, parameter=parameter)
    if isinstance(where, PostgresUrl):
        from .postgres import PostgresBoard

        return PostgresBoard(dsn=where.dsn)
    return SqliteBoard(path=where.path)


def answer_board(store: str | os.PathLike[str]) -> AnswerBoard:
    """The answer board of *store* (a path, ``sqlite:///…``, ``postgresql://…``), for answering
    from another process than the asking broker's:
    ``await answer_board(path).answer(qid, "rejected")``.

    Only the board is touched: the asking process keeps the store's writer.
    """
    return board_for(store)
