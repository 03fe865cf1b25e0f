"""Event stores: the protocol, the in-memory store, and the durable SQLite store."""

from ._memory import MemoryStore as MemoryStore
from ._protocol import EventStore as EventStore
from ._protocol import StoreError as StoreError
from ._recovery import RecoveredSession as RecoveredSession
from ._recovery import RecoveryReport as RecoveryReport
from ._sqlite import SqliteStore as SqliteStore
from ._sqlite import open_sqlite_store as open_sqlite_store
from ._sqlite_reader import open_sqlite_reader as open_sqlite_reader
from ._sqlite_schema import StoreLockedError as StoreLockedError
from ._sqlite_schema import StoreOpenError as StoreOpenError

__all__ = [name for name in dir() if not name.startswith("_")]
