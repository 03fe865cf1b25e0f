"""A new session with an id the caller derived (``session_id=``): what a service uses to map an
outside agent's sessions onto the log, resumable under the same id."""

from __future__ import annotations

import pathlib
import uuid

import pytest

from broker import open_broker


async def test_a_new_session_takes_the_id_given_and_resumes_under_it(
    tmp_path: pathlib.Path,
) -> None:
    sid = str(uuid.uuid5(uuid.NAMESPACE_URL, "claude-code/abc"))
    store = tmp_path / "log.sqlite"
    async with open_broker(store=store) as broker:
        async with broker.open_session(session_id=sid) as session:
            assert session.id == sid
            with pytest.raises(ValueError, match="is open in this broker already"):
                await broker.start_session(session_id=sid)
    async with open_broker(store=store) as broker, broker.open_session(resume=sid) as again:
        assert again.id == sid


@pytest.mark.parametrize("bad", ["", "not-a-uuid", 7, "6b1f3f0e-5a0c-4f55-9d4e"])
async def test_an_id_that_is_not_a_uuid_is_refused_by_name(bad: object) -> None:
    async with open_broker() as broker:
        with pytest.raises(ValueError, match="session_id must be a UUID string"):
            await broker.start_session(session_id=bad)  # type: ignore[arg-type]


async def test_resuming_an_id_the_store_does_not_hold_says_so_by_its_kind() -> None:
    from broker import ResumeError, SessionNotStoredError

    sid = str(uuid.uuid4())
    async with open_broker() as broker:
        with pytest.raises(SessionNotStoredError, match=r"is not in .*: pass the id") as caught:
            await broker.start_session(resume=sid)
        assert isinstance(caught.value, ResumeError)  # what callers catch today still catches it
        async with broker.open_session(session_id=sid) as session:
            assert session.id == sid
