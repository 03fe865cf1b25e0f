"""Argument types for a store: any store (``store_url``: a path, ``sqlite:///PATH`` or
``postgresql://…``), or one the command can only read as a SQLite file (``sqlite_file``);
argparse adds the option's name to the message."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..store import PostgresUrl, StoreUrlError, parse_store_url

__all__ = ["sqlite_file", "store_url"]


def sqlite_file(why: str) -> Callable[[str], str]:
    """The type of an argument naming a SQLite store file, as a path or ``sqlite:///PATH``
    (the path as given, or the URL's path); *why* says, for a ``postgresql://`` URL, why this
    command needs a file."""

    def parse(text: str) -> str:
        try:
            where = parse_store_url(text)
        except StoreUrlError as exc:
            raise argparse.ArgumentTypeError(
                "expected a file path or sqlite:///PATH, got a URL of another kind: "
                "pass a SQLite file path"
            ) from exc
        if isinstance(where, PostgresUrl):
            raise argparse.ArgumentTypeError(
                f"{why}, got a postgresql:// URL: pass a file path or sqlite:///PATH"
            )
        return where.path

    return parse


def store_url(text: str) -> str:
    """A store as given: a path, ``sqlite:///PATH`` or ``postgresql://…`` (checked here; the
    message never repeats the text, which may carry a password)."""
    try:
        parse_store_url(text)
    except StoreUrlError as exc:
        raise argparse.ArgumentTypeError(
            "expected a file path, sqlite:///PATH or postgresql://…: pass the store the broker "
            "writes"
        ) from exc
    return text
