"""The tests' PostgreSQL machinery: a throwaway cluster and one fresh database per test."""

from __future__ import annotations

import pytest

from .postgres_server import NoServerError, ThrowawayCluster, answers, fresh_database

pytestmark = pytest.mark.slow

psycopg = pytest.importorskip("psycopg")


def test_a_throwaway_cluster_serves_restarts_and_leaves_nothing_behind() -> None:
    try:
        with ThrowawayCluster.start() as cluster:
            root = cluster.root
            assert answers(cluster.dsn)
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                cluster.restart()
                # The restart dropped the connection: a lost server, on a server of our own.
                with pytest.raises(psycopg.OperationalError):
                    conn.execute("SELECT 1")
            assert answers(cluster.dsn)
    except NoServerError as exc:
        pytest.skip(f"cannot start a throwaway cluster here: {exc}")
    assert not root.exists()
    assert not answers(cluster.dsn)


def test_a_fresh_database_is_empty_and_dropped_after(postgres_server: str) -> None:
    with fresh_database(postgres_server) as dsn:
        with psycopg.connect(dsn) as conn:
            name = conn.execute("SELECT current_database()").fetchone()
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert tables == (0,)
    with psycopg.connect(postgres_server) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", name).fetchall()
    assert left == []
