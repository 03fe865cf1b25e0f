"""broker serve: the local approval service that Claude Code's and Codex's hooks ask.

examples:
  broker serve                                   the store under $XDG_STATE_HOME/broker/
  broker serve --rules .broker/rules.toml --inbox 8765
  broker serve --store postgresql://broker@db/broker --deadline 120

One long-running process owns the store, the sessions, the rules and the answerers. Hook
processes (broker hook claude-code, broker hook codex) reach it over a Unix socket
($BROKER_SOCKET, else $XDG_RUNTIME_DIR/broker/serve.sock, else /tmp/broker-UID/serve.sock;
owner-only, the peer's uid checked). Each agent session is one broker session of the log,
resumed when the agent session calls again, also after a restart. Questions no rule decides
wait on the store's answer board: broker pending / broker answer STORE ID allow|reject|always,
the web inbox (--inbox PORT), other hosts on PostgreSQL. No answer within --deadline: the call
is refused (unavailable), never allowed.

Exit status: 130/143 stopped by SIGINT/SIGTERM; 2 it could not start (the store, the socket,
a rules file).
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
from functools import partial
from typing import TYPE_CHECKING

import trio

from broker_hook import DEFAULT_TIMEOUT, default_socket_path

from .._broker import open_broker
from ..rules import Layer, Rule, RuleSet, RulesFileError, load_rules
from ..serve import ApprovalService, SocketError, serve_socket
from ..telemetry import export_from_env
from ._errors import CliError
from ._inbox import port_number, with_inbox
from ._numbers import positive_seconds
from ._signals import run_until_signalled

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

log = logging.getLogger("broker.serve")


def register(sub: _Sub) -> None:
    """Add the ``serve`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "serve",
        help="run the approval service Claude Code's and Codex's hooks ask (broker hook)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        help="the session log: a SQLite file path, sqlite:///PATH or postgresql://… (default: "
        "$XDG_STATE_HOME/broker/serve.sqlite)",
    )
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="FILE",
        help="a rules file (TOML, or a Claude Code settings .json); repeat for more",
    )
    parser.add_argument(
        "--project-rules",
        metavar="FILE",
        help="where 'always, for the project' answers append their rule (read as rules too)",
    )
    parser.add_argument("--socket", help="the socket to listen on (default: see above)")
    parser.add_argument(
        "--deadline",
        type=positive_seconds,
        default=DEFAULT_TIMEOUT - 5,
        help=f"seconds a question waits for an answer, then is refused (default "
        f"{DEFAULT_TIMEOUT - 5:g}: below broker hook's --timeout, {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--inbox",
        type=port_number,
        metavar="PORT",
        help="also serve the web inbox on 127.0.0.1:PORT (0: any free port); its address, "
        "with a new token, goes to stderr",
    )
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.set_defaults(func=run)


def _default_store() -> pathlib.Path:
    state = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local" / "state")
    return pathlib.Path(state) / "broker" / "serve.sqlite"


def _rules(files: list[str], project: str | None) -> RuleSet:
    loaded: list[Rule] = []
    try:
        for file in files:
            loaded.extend(load_rules(file, Layer.PROJECT))
        if project is not None and os.path.exists(project) and project not in files:
            loaded.extend(load_rules(project, Layer.PROJECT))
    except RulesFileError as exc:
        raise CliError(f"--rules: {exc}") from None
    return RuleSet(loaded)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status."""
    logging.basicConfig(
        level=args.log_level,
        handlers=[logging.StreamHandler(sys.stderr)],
        format="%(asctime)s %(name)s %(message)s",
    )
    rules = _rules(args.rules, args.project_rules)
    store = args.store or _default_store()
    if args.store is None:
        store.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    socket_path = args.socket or default_socket_path()
    with export_from_env("serve"):  # OpenTelemetry, when the OTEL_* variables ask for it
        return trio.run(
            run_until_signalled,
            "serve",
            partial(
                _serve, store, rules, args.project_rules, socket_path, args.deadline, args.inbox
            ),
        )


async def _serve(
    store: str | pathlib.Path,
    rules: RuleSet,
    project_rules: str | None,
    socket_path: str,
    deadline: float,
    inbox: int | None,
) -> int:
    async with open_broker(store=store, rules=rules, project_rules=project_rules) as broker:
        remote = broker.remote_answerer(deadline=deadline, allow_always=True)
        async with broker.answerer(remote), trio.open_nursery() as nursery:
            service = ApprovalService(broker=broker, nursery=nursery)

            async def listening() -> None:
                try:
                    path = await nursery.start(serve_socket, socket_path, service)
                except SocketError as exc:
                    raise CliError(str(exc)) from None
                print(f"broker serve: listening on {path}", file=sys.stderr, flush=True)
                await trio.sleep_forever()

            if inbox is None:
                await listening()
            else:
                await with_inbox(broker, inbox, listening)
    return 0
