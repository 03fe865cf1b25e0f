"""The ``broker`` command line. Nothing in the library imports this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _acp, _chaos, _demo, _hooks, _log

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-command per feature module."""
    parser = argparse.ArgumentParser(prog="broker", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _demo.register(sub)
    _acp.register(sub)
    _chaos.register(sub)
    _log.register(sub)
    _hooks.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
