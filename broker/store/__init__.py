"""Event stores: the protocol, the in-memory store, and the durable stores.

The store-neutral parts — the group-commit writer (:mod:`._writer`), staging with the hash
chain and checkpoints (:mod:`._stage`, :mod:`._chain`, :mod:`._checkpoint`), tickets and
requests (:mod:`._requests`), recovery (:mod:`._recovery`) — live here; each durable
store adds its SQL and connection in its own folder: :mod:`broker.store.sqlite`,
:mod:`broker.store.postgres`. :func:`open_store` opens the one a URL names.
"""

from ._memory import MemoryStore as MemoryStore
from ._open import open_store as open_store
from ._protocol import EventStore as EventStore
from ._protocol import SessionFencedError as SessionFencedError
from ._protocol import SessionOwnedError as SessionOwnedError
from ._protocol import StoreError as StoreError
from ._protocol import StoreLockedError as StoreLockedError
from ._protocol import StoreOpenError as StoreOpenError
from ._recovery import RecoveredSession as RecoveredSession
from ._recovery import RecoveryReport as RecoveryReport
from ._url import StoreUrlError as StoreUrlError
from ._url import parse_store_url as parse_store_url
from .postgres import open_postgres_store as open_postgres_store
from .sqlite import SqliteStore as SqliteStore
from .sqlite import open_sqlite_reader as open_sqlite_reader
from .sqlite import open_sqlite_store as open_sqlite_store

__all__ = [
    "EventStore",
    "MemoryStore",
    "RecoveredSession",
    "RecoveryReport",
    "SessionFencedError",
    "SessionOwnedError",
    "SqliteStore",
    "StoreError",
    "StoreLockedError",
    "StoreOpenError",
    "StoreUrlError",
    "open_postgres_store",
    "open_sqlite_reader",
    "open_sqlite_store",
    "open_store",
    "parse_store_url",
]
