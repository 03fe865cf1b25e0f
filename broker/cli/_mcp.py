"""``broker mcp-gate``: a transparent MCP proxy on stdio that asks before any tool runs; the
MCP server is a command it starts (stdio) or a URL (streamable HTTP).

stdout carries only MCP frames; logs go to stderr (the upstream server's stderr too).
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys
import time
from typing import TYPE_CHECKING

import trio

from .. import open_broker
from .._private_files import make_private_dirs
from ..mcp import GateRules, RulesError, UpstreamUrl, serve_mcp_gate
from ..store import redact_dsn
from ..telemetry import export_from_env
from ._errors import EXIT_CHECK_FAILED, CliError
from ._inbox import port_number, with_inbox
from ._numbers import positive_seconds
from ._signals import run_until_signalled

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

DESCRIPTION = """\
Stand between an MCP client (an editor, a desktop app, an agent) and an MCP server: every
message passes through unchanged, except tools/call, which runs only once the broker says
allowed-once. Otherwise the client gets a tool result with isError and the reason, and the
server never sees the call. Every question is an audit pair in the store's log.

Who answers, in order: the --rules file (allow/deny tool-name globs); then the client's user
(an elicitation prompt, when the client supports it) racing an answer from another terminal
(broker pending STORE / broker answer STORE ID allow); nobody within --deadline: unavailable.

examples:
  broker mcp-gate --store log.sqlite -- npx -y @modelcontextprotocol/server-filesystem ~/notes
  broker mcp-gate --rules gate.toml --store log.sqlite -- python my_server.py
  broker mcp-gate --upstream-url http://127.0.0.1:8000/mcp
                                     a server already running, over streamable HTTP
      gate.toml:  allow = ["read_*", "list_*"]   deny = ["delete_*"]
  broker pending log.sqlite          (another terminal) the calls waiting for an answer
  broker answer log.sqlite ID allow  run that one call once
  broker mcp-gate --inbox 0 -- python my_server.py
                                     answer in a browser: the address goes to stderr
"""


def register(sub: _Sub) -> None:
    """Add the ``mcp-gate`` sub-command."""
    parser = sub.add_parser(
        "mcp-gate",
        help="gate an MCP server's tool calls: ask before any tool runs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--store",
        help="session log: a SQLite file path (or sqlite:///PATH), a postgresql:// URL, or "
        "':memory:' for none (no remote answers then); default: a new SQLite file under "
        "$XDG_STATE_HOME/broker/",
    )
    parser.add_argument(
        "--rules", type=pathlib.Path, help="a TOML file: allow = [...], deny = [...]"
    )
    parser.add_argument(
        "--deadline",
        type=positive_seconds,
        default=300.0,
        help="seconds a tool call waits for an answer before it is refused (default 300)",
    )
    parser.add_argument(
        "--server-deadline",
        type=positive_seconds,
        default=600.0,
        help="seconds the server may take to answer a request before the client gets an "
        "error and the request is cancelled upstream (default 600)",
    )
    parser.add_argument(
        "--no-remote-answers",
        action="store_true",
        help="do not wait for answers from another terminal (broker answer STORE ...)",
    )
    parser.add_argument(
        "--inbox",
        type=port_number,
        metavar="PORT",
        help="also serve the web inbox on 127.0.0.1:PORT (0: any free port), where the calls "
        "wait for an answer too (even with --store :memory:); its address, with a new token, "
        "goes to stderr",
    )
    parser.add_argument(
        "--upstream-url",
        metavar="URL",
        help="gate the MCP server at this http:// or https:// URL (streamable HTTP) instead of "
        "starting SERVER_CMD",
    )
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.add_argument(
        "server",
        nargs=argparse.REMAINDER,
        metavar="-- SERVER_CMD ARGS",
        help="the MCP server to start and gate, after -- (or --upstream-url)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Gate until the client closes stdin (or the server exits); returns the exit status: 0,
    or 1 when the server exited with a failure status of its own, 2 for a usage error."""
    command = list(args.server)
    if command and command[0] == "--":
        command = command[1:]
    url: str | None = args.upstream_url
    if url is not None and command:
        raise CliError(
            "--upstream-url and a server command after -- are exclusive: gate one MCP server, "
            "by its URL or by its command"
        )
    if url is None and not command:
        raise CliError(
            "no MCP server to gate: name it after --, e.g. broker mcp-gate -- npx -y SERVER, "
            "or pass --upstream-url http://HOST:PORT/mcp"
        )
    server: list[str] | str = command
    if url is not None:
        try:
            UpstreamUrl.parse(url)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        server = url
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    try:
        rules = GateRules.load(args.rules) if args.rules is not None else GateRules()
    except RulesError as exc:
        raise CliError(str(exc)) from None
    store: str | None = args.store if args.store != ":memory:" else None
    if args.store is None:
        store = str(_default_store())
        make_private_dirs(pathlib.Path(store).parent)
    # The in-process inbox answers on this broker's own board, so it needs no durable store.
    remote = (store is not None and not args.no_remote_answers) or args.inbox is not None
    if store is not None:
        where = redact_dsn(store) if "://" in store else store
        print(f"broker mcp-gate: session log {where}", file=sys.stderr)
    with export_from_env("mcp-gate"):  # OpenTelemetry, when the OTEL_* variables ask for it
        return trio.run(
            run_until_signalled,
            "mcp-gate",
            _serve,
            server,
            store,
            rules,
            remote,
            args.deadline,
            args.server_deadline,
            args.inbox,
        )


def _default_store() -> pathlib.Path:
    state = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local" / "state")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return pathlib.Path(state) / "broker" / f"mcp-gate-{stamp}-{os.getpid()}.sqlite"


async def _serve(
    server: list[str] | str,
    store: str | None,
    rules: GateRules,
    remote: bool,
    deadline: float,
    server_deadline: float,
    inbox: int | None,
) -> int:
    client_in = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    client_out = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
    exited: list[int | None] = []
    async with open_broker(store=store) as broker:

        async def gate() -> None:
            status = await serve_mcp_gate(
                broker,
                server,  # a command, or a URL (a string)
                client_in=client_in,
                client_out=client_out,
                rules=rules,
                remote_answers=remote,
                deadline=deadline,
                server_deadline=server_deadline,
            )
            exited.append(status)

        try:
            await (gate() if inbox is None else with_inbox(broker, inbox, gate))
        except (FileNotFoundError, PermissionError) as exc:
            raise CliError(
                f"cannot start the MCP server {server[0]!r}: {exc.strerror}: check SERVER_CMD "
                "(the command after --)"
            ) from None
    if exited and exited[0] is not None and exited[0] > 0:
        # A server that failed on its own (not stopped by the gate's SIGTERM/SIGKILL, which
        # show as negative statuses): say so, for the host's log.
        raise CliError(
            f"the MCP server {server[0]!r} exited with status {exited[0]}: see its messages "
            "above, and check SERVER_CMD",
            status=EXIT_CHECK_FAILED,
        )
    return 0
