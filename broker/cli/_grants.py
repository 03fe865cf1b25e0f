"""broker grants list STORE / broker grants revoke STORE GRANT_ID: the grants sessions hold.

examples:
  broker grants list logs/sessions.sqlite                    every grant of every session
  broker grants list logs/sessions.sqlite --session ID --json
  broker grants revoke logs/sessions.sqlite g-0123456789abcdef --by alice

A grant is what "always allow" (or broker.remember in the library) gave a session: a tool, or
the commands that start with a prefix, until it is revoked or its expiry passes. Revoking from
here works while the session runs in another process, on this host or (PostgreSQL) another:
no question decided after the revocation is stored is covered by the grant; the session's log
records the revocation at the first question the grant would have covered.

Exit status: 0 done (revoke: revoked now, or already); 1 no such grant, or one only its own
process can revoke (the seed's id-less grant of a whole tool); 2 the command could not run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from typing import TYPE_CHECKING

import attrs
import trio

from .._codec import utf8_safe
from .._display import printable
from ..store import GrantRevocation, GrantRow, board_for, check_grant_id, list_grants
from ._errors import EXIT_CHECK_FAILED, EXIT_OK, CliError

if TYPE_CHECKING:
    from ..store import AnswerBoard

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]


def register(sub: _Sub) -> None:
    """Add the ``grants`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "grants",
        help="list the grants sessions hold, revoke one",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="grants_command", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every grant, with its status")
    listing.add_argument("store", help="the store: a file path, sqlite:///PATH, postgresql://…")
    listing.add_argument("--session", help="only the grants of this session id")
    listing.add_argument("--json", action="store_true", help="one JSON array on stdout")
    listing.set_defaults(func=run_list)
    revoke = actions.add_parser("revoke", help="take a grant back, from any process")
    revoke.add_argument("store", help="the store: a file path, sqlite:///PATH, postgresql://…")
    revoke.add_argument("grant_id", help="the grant's id (broker grants list shows them)")
    revoke.add_argument("--by", help="who revokes it (recorded)")
    revoke.set_defaults(func=run_revoke)


def _when(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


async def _revocations(board: AnswerBoard, rows: list[GrantRow]) -> dict[str, GrantRevocation]:
    await trio.lowlevel.checkpoint()
    found: dict[str, GrantRevocation] = {}
    for row in rows:
        if row.status == "active" and row.id.startswith("g-"):
            revocation = await board.grant_revocation(row.id)
            if revocation is not None:
                found[row.id] = revocation
    return found


def _status(row: GrantRow, elsewhere: GrantRevocation | None, now_ms: int) -> str:
    if row.status != "active":
        by = f" by {row.revoked_by}" if row.revoked_by else ""
        return f"{row.status}{by}"
    if elsewhere is not None:
        by = f" by {elsewhere.by}" if elsewhere.by else ""
        return f"revoked{by} (from elsewhere; the session records it at its next question)"
    if row.expires_at_ms is not None and row.expires_at_ms <= now_ms:
        return "expired"
    return "active"


def run_list(args: argparse.Namespace) -> int:
    """Run ``broker grants list``; returns the exit status."""
    rows = list_grants(args.store, args.session)
    elsewhere = trio.run(_revocations, board_for(args.store), rows)
    now_ms = time.time_ns() // 1_000_000
    shown = [
        {
            **{k: v for k, v in attrs.asdict(row).items() if k not in ("status", "revoked_by")},
            "at": _when(row.at_ms),
            "expiresAt": _when(row.expires_at_ms),
            "status": _status(row, elsewhere.get(row.id), now_ms),
        }
        for row in rows
    ]
    if args.json:
        print(utf8_safe(json.dumps(shown, ensure_ascii=False)))
        return EXIT_OK
    if not shown:
        print("no grants")
        return EXIT_OK
    for item, row in zip(shown, rows, strict=True):
        what = f"tool {row.tool_name}"
        if row.command is not None:
            what += f" command {row.command!r}"
        by = f" by {row.by}" if row.by else ""
        until = f" until {item['expiresAt']}" if row.expires_at_ms is not None else ""
        print(
            printable(
                f"{row.id}  session {row.session_id}  {what}{by}  at {item['at']}{until}: "
                f"{item['status']}"
            )
        )
    return EXIT_OK


def run_revoke(args: argparse.Namespace) -> int:
    """Run ``broker grants revoke``; returns the exit status."""
    rows = [row for row in list_grants(args.store) if row.id == args.grant_id]
    shown = printable(args.grant_id)
    if not rows:
        print(f"no grant {shown} in {printable(args.store)}: broker grants list STORE shows them")
        return EXIT_CHECK_FAILED
    row = rows[-1]
    if row.status != "active":
        print(f"grant {shown}: already {printable(_status(row, None, 0))}")
        return EXIT_OK
    try:
        check_grant_id(row.id)
    except ValueError:
        print(
            f"grant {shown} is the seed's grant of a whole tool (no id): only its session's "
            "process can revoke it (broker.revoke(session, tool_name))"
        )
        return EXIT_CHECK_FAILED
    try:
        revocation = trio.run(_revoke, board_for(args.store), row.id, args.by)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    by = f" by {printable(revocation.by)}" if revocation.by else ""
    print(
        f"grant {shown}: revoked{by}; no question of session {row.session_id} decided from "
        "now on is covered by it"
    )
    return EXIT_OK


async def _revoke(board: AnswerBoard, grant_id: str, by: str | None) -> GrantRevocation:
    try:
        return await board.revoke_grant(grant_id, by)
    finally:
        with trio.CancelScope(shield=True):
            await board.aclose()
