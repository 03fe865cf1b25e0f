"""``broker grants list`` and ``broker grants revoke`` from another process, while the session
that holds the grant runs (SQLite and PostgreSQL): the next question that the grant would have
covered is asked again, and the session's log records who revoked it."""

from __future__ import annotations

import json
import pathlib
import sys

import pytest
import trio

from broker import ApprovalRequest, ApprovalRevoke, Broker, Session, Source, open_broker
from broker.store import open_sqlite_store
from broker.store.board import MemoryBoard, check_grant_id

pytestmark = pytest.mark.slow


async def grants_cli(*argv: str) -> tuple[int, str]:
    done = await trio.run_process(
        [sys.executable, "-m", "broker.cli", "grants", *argv],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return done.returncode, done.stdout.decode() + done.stderr.decode()


async def source_of(broker: Broker, session: Session, command: str) -> Source | None:
    req = ApprovalRequest(agent=session.agent, tool_name="bash", arguments={"command": command})
    return (await broker.request_decision(req)).source


async def revoke_from_another_process(store: str) -> list[object]:
    async with open_broker(store=store) as broker, broker.open_session() as session:
        grant = await broker.remember(session, "bash", command="make", by="alice")
        async with session.turn():
            assert await source_of(broker, session, "make test") is Source.GRANT
            code, out = await grants_cli("list", store, "--json")
            assert code == 0, out
            [row] = json.loads(out)
            assert (row["id"], row["command"], row["by"], row["status"]) == (
                grant.id,
                "make",
                "alice",
                "active",
            )
            code, out = await grants_cli("revoke", store, grant.id, "--by", "bob")
            assert (code, out) == (
                0,
                f"grant {grant.id}: revoked by bob; no question of session {session.id} "
                "decided from now on is covered by it\n",
            )
            code, out = await grants_cli("list", store)
            assert "revoked by bob (from elsewhere" in out
            # The very next question is not covered: asked again (no answerer here).
            assert await source_of(broker, session, "make test") is Source.NO_ANSWERER
            assert await source_of(broker, session, "make test") is Source.NO_ANSWERER
        code, out = await grants_cli("list", store)
        assert out.endswith(": revoked by bob\n"), out
        code, out = await grants_cli("revoke", store, grant.id)
        assert (code, out) == (0, f"grant {grant.id}: already revoked by bob\n")
        return [e for e in await broker.store.read(session.id) if isinstance(e, ApprovalRevoke)]


async def test_revoked_from_another_process_on_sqlite(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    with trio.fail_after(60):
        revokes = await revoke_from_another_process(store)
    assert len(revokes) == 1
    assert revokes[0] == ApprovalRevoke(id=revokes[0].id, by="bob")  # type: ignore[attr-defined]


async def test_revoked_from_another_host_on_postgresql(postgres_dsn: str) -> None:
    with trio.fail_after(60):
        revokes = await revoke_from_another_process(postgres_dsn)
    assert [getattr(r, "by", None) for r in revokes] == ["bob"]


async def test_what_cannot_be_revoked_says_why(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    async with open_broker(store=store) as broker, broker.open_session() as session:
        await broker.grant(session, "bash")  # the seed's id-less grant
    with trio.fail_after(60):
        code, out = await grants_cli("revoke", store, "g-0000000000000000")
        assert (code, out) == (
            1,
            f"no grant g-0000000000000000 in {store}: broker grants list STORE shows them\n",
        )
        code, out = await grants_cli("revoke", store, "bash")
        assert code == 1
        assert out.startswith("grant bash is the seed's grant of a whole tool (no id)")
        code, out = await grants_cli("list", store, "--session", "nope")
        assert code == 2
        assert "has no session 'nope'" in out


async def test_an_empty_store_has_no_grants(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    async with open_sqlite_store(store):
        pass
    with trio.fail_after(60):
        assert await grants_cli("list", store) == (0, "no grants\n")


async def test_a_board_keeps_the_first_revocation_and_refuses_a_bad_id() -> None:
    board = MemoryBoard()
    first = await board.revoke_grant("g-0123456789abcdef", "alice")
    again = await board.revoke_grant("g-0123456789abcdef", "bob")
    assert again == first
    assert await board.grant_revocation("g-fedcba9876543210") is None
    with pytest.raises(ValueError, match=r"^grant_id must be a grant's id \(g- and 16 hex"):
        check_grant_id("g-xyz")
