"""The PostgreSQL event store: one database shared by broker processes.

Only what is PostgreSQL's lives here — the schema and its checks, the SQL of a group, the
connection on the writer's thread; the grouping, chaining, checkpoints and tickets are the
store's (:mod:`broker.store`). psycopg is imported only when a store is opened.
"""

from ._store import PostgresStore as PostgresStore
from ._store import open_postgres_store as open_postgres_store

__all__ = ["PostgresStore", "open_postgres_store"]
