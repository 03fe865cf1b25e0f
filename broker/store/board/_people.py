"""People who may answer, with identities: a name, groups, and a personal token kept only as
its hash, in the store, so every process and host on that store knows them.

Synopsis::

    token = new_token()                             # shown once, to the person
    person = Person(name="alice", groups=("ops",), token_hash=token_hash(token), added_ms=...)
    await registry.add(person)                      # PeopleExistsError if the name is taken
    await registry.identify(token)                  # Person("alice", ...) or None
    await registry.remove("alice")                  # True; her token stops working at once

A token is 32 random bytes (``bkr_`` and 43 URL-safe characters): a hash of it (SHA-256) is
all the store keeps, and a lookup is by that hash, so the store never holds anything that
answers as the person. Names are what the log records as ``answeredBy``: lower-case letters,
digits, ``.``, ``_`` and ``-`` (no ``:``, which ``uid:NAME`` of an OS user keeps apart).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Protocol, runtime_checkable

import attrs

from ..._errors import BrokerError

__all__ = [
    "PeopleExistsError",
    "PeopleRegistry",
    "Person",
    "check_group",
    "check_person_name",
    "new_token",
    "token_hash",
]

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: The prefix of every personal token (so a leaked one is recognisable in a scan).
TOKEN_PREFIX = "bkr_"


class PeopleExistsError(BrokerError, ValueError):
    """A person of that name is registered already (remove them first)."""


def check_person_name(name: object, *, parameter: str = "name") -> str:
    """*name* if it can be a person's name, else ValueError naming *parameter* and the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"{parameter} must be 1-64 lower-case letters, digits, '.', '_' or '-', starting "
            f"with a letter or digit, got {name!r}: e.g. alice or ops-bot"
        )
    return name


def check_group(group: object) -> str:
    """*group* if it can be a group's name (the same rule as a person's name)."""
    return check_person_name(group, parameter="group")


def new_token() -> str:
    """A new personal token: shown once, never stored."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the store keeps of *token* (hex SHA-256; a token has 256 random bits, so no salt
    or stretching adds anything)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@attrs.frozen(kw_only=True)
class Person:
    """Someone who may answer: ``name`` (recorded as ``answeredBy``), ``groups`` (what rules'
    ``approvers`` name as ``group:NAME``), the hash of their token, when they were added."""

    name: str
    groups: tuple[str, ...] = ()
    token_hash: str = attrs.field(repr=False)
    added_ms: int

    def is_in(self, approvers: tuple[str, ...]) -> bool:
        """Whether *approvers* (names, and ``group:NAME``) name this person."""
        return self.name in approvers or any(f"group:{g}" in approvers for g in self.groups)


@runtime_checkable
class PeopleRegistry(Protocol):
    """The people of a store. Every method reads or writes the store itself (no cache), so a
    removal holds in every process at once."""

    async def add(self, person: Person) -> None:
        """Register *person*; :class:`PeopleExistsError` if the name is taken.
        Cancellation: the person may or may not have been stored."""
        ...

    async def remove(self, name: str) -> bool:
        """Remove *name*; whether someone was removed. Cancellation: it may have happened."""
        ...

    async def people(self) -> list[Person]:
        """Everyone registered, by name. Cancellation: nothing changes."""
        ...

    async def identify(self, token: str) -> Person | None:
        """The person whose token *token* is, or None. Cancellation: nothing changes."""
        ...
