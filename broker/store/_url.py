"""Where a store lives, as given: a file path, ``sqlite:///path`` or ``postgresql://…``.

Synopsis::

    parse_store_url("logs/sessions.sqlite")       # SqliteUrl(path='logs/sessions.sqlite')
    parse_store_url("sqlite:///var/b.db")         # SqliteUrl(path='/var/b.db')
    parse_store_url("postgresql://host/broker")   # PostgresUrl(dsn='postgresql://host/broker')
    parse_store_url("mysql://x")                  # StoreUrlError naming the accepted forms

Pure: nothing is opened. Any string with a ``scheme://`` is a URL (so a file path must not
contain ``://``); anything else is a file path, exactly as before URLs were accepted.
"""

from __future__ import annotations

import os
import re
import urllib.parse

import attrs

from .._errors import BrokerError

__all__ = [
    "ACCEPTED_STORE_FORMS",
    "PostgresUrl",
    "SqliteUrl",
    "StoreUrlError",
    "parse_store_url",
    "redact_dsn",
]

#: What a store may be given as, for error messages.
ACCEPTED_STORE_FORMS = "a file path, sqlite:///PATH or postgresql://… (or postgres://…)"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES_SCHEMES = ("postgresql", "postgres")


class StoreUrlError(BrokerError, ValueError):
    """A store location that is neither a file path nor a URL of a store this broker has."""


@attrs.frozen
class SqliteUrl:
    """A SQLite store file."""

    path: str


@attrs.frozen
class PostgresUrl:
    """A PostgreSQL database, as a libpq connection URL."""

    dsn: str

    def __str__(self) -> str:
        return redact_dsn(self.dsn)


def redact_dsn(dsn: str) -> str:
    """*dsn* with its password (if any) replaced by ``***``, for messages and logs."""
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def parse_store_url(
    value: str | os.PathLike[str], *, parameter: str = "store"
) -> SqliteUrl | PostgresUrl:
    """Which store *value* names. Raises :class:`StoreUrlError` (a :class:`ValueError`) whose
    message names *parameter* and the accepted forms."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise StoreUrlError(
            f"{parameter} must be {ACCEPTED_STORE_FORMS}, got {value!r}: pass a string or a "
            "path object"
        )
    if not value:
        raise StoreUrlError(
            f"{parameter} must be {ACCEPTED_STORE_FORMS}, got an empty string: name the store"
        )
    match = _SCHEME.match(value)
    if match is None:
        return SqliteUrl(value)
    scheme = match.group(1).lower()
    if scheme in _POSTGRES_SCHEMES:
        return PostgresUrl(value)
    if scheme == "sqlite":
        rest = value[match.end() :]
        if not rest.startswith("/") or rest == "/":
            raise StoreUrlError(
                f"{parameter} {value!r} is not a sqlite URL of a file: write sqlite:///PATH "
                "with an absolute path (three slashes), or pass the file path itself"
            )
        return SqliteUrl(urllib.parse.unquote(rest))
    raise StoreUrlError(
        f"{parameter} must be {ACCEPTED_STORE_FORMS}, got a {scheme}:// URL: "
        "pass a SQLite file path or a PostgreSQL URL"
    )
