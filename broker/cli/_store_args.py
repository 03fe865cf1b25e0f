"""Argument types for a store the command can only read as a SQLite file (``broker demo
--store``, ``broker log … STORE``): a path or ``sqlite:///PATH``; argparse adds the option's
name to the message."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..store import PostgresUrl, StoreUrlError, parse_store_url

__all__ = ["sqlite_file"]


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
