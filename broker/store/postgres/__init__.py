"""The PostgreSQL event store: one database shared by broker processes.

Only what is PostgreSQL's lives here — the schema and its checks, the SQL of a group, the
connection on the writer's thread; the grouping, chaining, checkpoints and tickets are the
store's (:mod:`broker.store`). psycopg is imported only when a store is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._module_metadata import fixup_module_metadata
from ._store import PostgresStore as PostgresStore
from ._store import open_postgres_store as open_postgres_store

if TYPE_CHECKING:
    from ._board import PostgresBoard as PostgresBoard
    from ._reader import open_postgres_reader as open_postgres_reader

__all__ = ["PostgresStore", "open_postgres_store"]

# For the other packages of broker (their front door into this one), not part of the public
# API: the board and the reader import psycopg at once, so they are loaded on first use
# (PEP 562), and importing broker never needs psycopg.
_LAZY = {"PostgresBoard": "._board", "open_postgres_reader": "._reader"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module, __name__), name)


fixup_module_metadata(__name__, globals())
