"""broker people add|list|remove STORE: the people who may answer, with their own tokens.

examples:
  broker people add logs/sessions.sqlite alice --group ops     prints alice's token, once
  broker people list logs/sessions.sqlite
  broker people remove logs/sessions.sqlite alice              her token stops working at once

A person's token identifies them wherever they answer: broker answer --token-file FILE (or
$BROKER_TOKEN), and the web inbox's sign-in. The store keeps only its hash, so every process
and host on the store knows the person, and nothing in the store answers as them. Keep the
token in a file only you can read (chmod 600); never put it on a command line, where ps
shows it.

Exit status: 0 done; 1 remove: no such person; 2 the command could not run (a bad name, a
person of that name exists already, the store).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from typing import TYPE_CHECKING, TypeVar

import trio

from .._codec import utf8_safe
from ..store import (
    PeopleExistsError,
    Person,
    SqliteUrl,
    board_for,
    check_group,
    check_person_name,
    new_token,
    open_store,
    parse_store_url,
    token_hash,
)
from ._errors import EXIT_CHECK_FAILED, EXIT_OK, CliError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ..store import AnswerBoard

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

T = TypeVar("T")


def register(sub: _Sub) -> None:
    """Add the ``people`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "people",
        help="the people who may answer: add (prints their token once), list, remove",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="people_command", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="register a person; their token is printed once")
    add.add_argument("store", help="the store: a file path, sqlite:///PATH, postgresql://…")
    add.add_argument("name", help="their name, as the log records it (e.g. alice)")
    add.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        help="a group they belong to (rules name it as group:G); repeat for more",
    )
    add.set_defaults(func=run_add)
    listing = actions.add_parser("list", help="everyone registered")
    listing.add_argument("store", help="the store: a file path, sqlite:///PATH, postgresql://…")
    listing.add_argument("--json", action="store_true", help="one JSON array on stdout")
    listing.set_defaults(func=run_list)
    remove = actions.add_parser("remove", help="remove a person: their token stops at once")
    remove.add_argument("store", help="the store: a file path, sqlite:///PATH, postgresql://…")
    remove.add_argument("name", help="their name")
    remove.set_defaults(func=run_remove)


def _exists(store: str) -> bool:
    """Whether *store* is a SQLite file that exists (a PostgreSQL one may lack its schema)."""
    where = parse_store_url(store)
    return isinstance(where, SqliteUrl) and os.path.exists(where.path)


async def _made(store: str, exists: bool) -> None:
    """Make the store when it does not exist yet (a new SQLite file, a PostgreSQL schema), so
    people can be added before anything ran on it; a store in use is left as it is."""
    if exists:
        await trio.lowlevel.checkpoint()
        return
    async with open_store(store):
        pass


async def _with_board(store: str, work: Callable[[AnswerBoard], Awaitable[T]]) -> T:
    board = board_for(store)
    try:
        return await work(board)
    finally:
        await board.aclose()


def run_add(args: argparse.Namespace) -> int:
    """Run ``broker people add``; returns the exit status."""
    try:
        name = check_person_name(args.name)
        groups = tuple(dict.fromkeys(check_group(g) for g in args.group))
    except ValueError as exc:
        raise CliError(str(exc)) from None
    token = new_token()
    person = Person(
        name=name, groups=groups, token_hash=token_hash(token), added_ms=time.time_ns() // 10**6
    )

    exists = _exists(args.store)

    async def add(board: AnswerBoard) -> None:
        await _made(args.store, exists)
        await board.add_person(person)

    try:
        trio.run(_with_board, args.store, add)
    except PeopleExistsError as exc:
        raise CliError(str(exc)) from None
    in_groups = f" (groups: {', '.join(groups)})" if groups else ""
    print(f"added {name}{in_groups}; their token, shown only now:")
    print(token)
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    """Run ``broker people list``; returns the exit status."""

    async def listed(board: AnswerBoard) -> list[Person]:
        return await board.people()

    people = trio.run(_with_board, args.store, listed)
    if args.json:
        rows = [
            {"name": p.name, "groups": list(p.groups), "added": _when(p.added_ms)} for p in people
        ]
        print(utf8_safe(json.dumps(rows, ensure_ascii=False)))
        return EXIT_OK
    if not people:
        print("no people are registered: broker people add STORE NAME")
        return EXIT_OK
    for p in people:
        groups = ", ".join(p.groups) or "-"
        print(f"{p.name:<24} groups: {groups:<24} added {_when(p.added_ms)}")
    return EXIT_OK


def _when(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="seconds")


def run_remove(args: argparse.Namespace) -> int:
    """Run ``broker people remove``; returns the exit status."""

    async def remove(board: AnswerBoard) -> bool:
        return await board.remove_person(args.name)

    if trio.run(_with_board, args.store, remove):
        print(f"removed {args.name}: their token no longer answers")
        return EXIT_OK
    print(f"broker people remove: no person named {args.name!r} in {args.store}")
    return EXIT_CHECK_FAILED
