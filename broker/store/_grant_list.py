"""Every grant a store's sessions hold or held, read from their logs (``broker grants list``).

Synopsis::

    for row in list_grants("logs/sessions.sqlite"):          # or sqlite:///…, postgresql://…
        print(row.id, row.session_id, row.tool_name, row.command, row.status)

Read-only: a snapshot of the logs, like ``broker log show``. A grant revoked from another
process (:meth:`~broker.store.AnswerBoard.revoke_grant`) is in the board until its session
records it; the CLI joins the two.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import attrs

from .._codec import EventDecodeError, decode_event
from .._events import ApprovalGrant, ApprovalRevoke
from ._logtools import LogToolError, open_reader

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ._rows import EventRow, StoreReader

__all__ = ["GrantRow", "list_grants"]


@attrs.frozen(kw_only=True)
class GrantRow:
    """A grant as its session's log tells it: ``status`` is ``active``, ``revoked`` or
    ``expired`` (recorded; an active grant past ``expires_at_ms`` is expired too, though no
    question has recorded it yet). The seed's id-less grant has its tool's name as ``id``."""

    id: str
    session_id: str
    tool_name: str
    command: str | None = None
    by: str | None = None
    at_ms: int | None = None
    expires_at_ms: int | None = None
    status: str = "active"
    revoked_by: str | None = None
    #: The project rules file the answer was also remembered in (revoking the grant ends it
    #: for its session; the rule stays in the file until someone removes it).
    rule_file: str | None = None


def list_grants(store: str | os.PathLike[str], session_id: str | None = None) -> list[GrantRow]:
    """The grants of every session of *store* (or of *session_id*), in log order. Raises
    :class:`LogToolError` for an unknown session or an event that cannot be read."""
    with open_reader(store) as reader:
        if session_id is not None:
            if reader.session(session_id) is None:
                raise LogToolError(
                    f"{reader.where} has no session {session_id!r}: broker log show "
                    f"{os.fspath(store)} lists them"
                )
            ids = [session_id]
        else:
            ids = [info.session_id for info in reader.sessions()]
        rows: list[GrantRow] = []
        # One session: walk its chain; every session: index the snapshot once (rows()).
        read = reader.linked_rows if session_id is not None else reader.rows
        for sid in ids:
            rows.extend(_grants_of(reader, sid, read))
        return rows


def _grants_of(
    reader: StoreReader, session_id: str, read: Callable[[str], Iterator[EventRow]]
) -> list[GrantRow]:
    found: dict[str, GrantRow] = {}
    for row in read(session_id):
        try:
            event = decode_event(row.line)
        except EventDecodeError as exc:
            raise LogToolError(
                f"{reader.where}: session {session_id!r} seq {row.seq} is not a valid event "
                f"({exc}): run 'broker log verify'"
            ) from exc
        if isinstance(event, ApprovalGrant):
            grant_id = event.id if event.id is not None else event.tool_name
            found[grant_id] = GrantRow(
                id=grant_id,
                session_id=session_id,
                tool_name=event.tool_name,
                command=event.command,
                by=event.by,
                at_ms=event.at_ms if event.at_ms is not None else row.ts_ms,
                expires_at_ms=event.expires_at_ms,
                rule_file=event.rule_file,
            )
        elif isinstance(event, ApprovalRevoke):
            revoked = event.id if event.id is not None else event.tool_name
            held = found.get(revoked) if revoked is not None else None
            if held is not None and held.status == "active":
                status = "expired" if event.expired else "revoked"
                found[held.id] = attrs.evolve(held, status=status, revoked_by=event.by)
    return list(found.values())
