"""The SQLite event store: one file, WAL, group commit through the store-neutral writer.

Only what is SQLite's lives here — the file format and its checks, the writer lock, the SQL of a
group, the read-only reader; the grouping, chaining, checkpoints and tickets are the store's
(:mod:`broker.store`).
"""

from .._protocol import StoreLockedError as StoreLockedError
from .._rows import EventRow as EventRow
from .._rows import SessionInfo as SessionInfo
from .._rows import StoredCheckpoint as StoredCheckpoint

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._board import SqliteBoard as SqliteBoard
from ._reader import SqliteReader as SqliteReader
from ._reader import open_sqlite_reader as open_sqlite_reader
from ._store import SqliteStore as SqliteStore
from ._store import open_sqlite_store as open_sqlite_store

__all__ = [
    "EventRow",
    "SessionInfo",
    "SqliteReader",
    "SqliteStore",
    "StoreLockedError",
    "StoredCheckpoint",
    "open_sqlite_reader",
    "open_sqlite_store",
]

from ..._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
