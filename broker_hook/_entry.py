"""The ``broker`` console command: ``broker hook ...`` runs here without importing
:mod:`broker` (a hook is a new process on every tool call); everything else is
:func:`broker.cli.main`."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> int:
    """Run the ``broker`` command line; returns the exit status."""
    if len(sys.argv) > 1 and sys.argv[1] == "hook":
        from . import run

        return run(sys.argv[2:])
    from broker.cli import main as cli_main

    return cli_main()
