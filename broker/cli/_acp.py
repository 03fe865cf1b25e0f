"""``broker acp``: the composed agent speaking the Agent Client Protocol on stdio.

stdout carries only protocol frames; logs go to stderr (or ``--log-file``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pathlib
import sys
import time
from functools import partial
from typing import IO, TYPE_CHECKING

import attrs
import trio

from .. import open_broker
from .._composition import Composition, CompositionError
from .._private_files import make_private_dirs
from ..acp import Direction, Frame, JsonRpcConnection, serve_acp
from ..agent import ScenarioError
from ..hooks import HookSettingsError
from ..store import redact_dsn
from ..telemetry import export_from_env
from ..tools import SandboxUnavailableError
from ._inbox import port_number, with_inbox
from ._numbers import duration, positive_seconds
from ._signals import run_until_signalled

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

DESCRIPTION = """\
Serve the composed agent to an editor over the Agent Client Protocol (ACP v1) on stdin and
stdout. Standard output carries only protocol frames; logs go to standard error (or
--log-file). Flags override the settings of the --config file.

examples:
  broker acp                                  the defaults: policy ask, read-only sandbox
  broker acp --config broker.toml             settings from a TOML file
  broker acp --store :memory: --allow-always  no session log file; offer "Always allow"
  broker acp --store log.sqlite --remote-answers
                                              answer from another terminal too:
                                              broker answer log.sqlite ID allow
"""


def register(sub: _Sub) -> None:
    """Add the ``acp`` sub-command."""
    parser = sub.add_parser(
        "acp",
        help="serve the composed agent over the Agent Client Protocol on stdio",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=pathlib.Path, help="a TOML composition file")
    parser.add_argument("--policy", choices=["ask", "never"], help="default approval policy")
    parser.add_argument(
        "--sandbox",
        choices=["read-only", "workspace-write", "danger-full-access", "none"],
        help="default sandbox mode of the bash tool (none: no sandbox at all)",
    )
    parser.add_argument("--scenario", help="scenario file (.json/.toml) or built-in name")
    parser.add_argument(
        "--store",
        help="session log: a SQLite file path (or sqlite:///PATH), a postgresql:// URL, or "
        "':memory:' for none (default: a new SQLite file per process under "
        "$XDG_STATE_HOME/broker/, so several agents never contend for one log)",
    )
    parser.add_argument(
        "--hooks",
        help="Claude Code settings file: its PreToolUse hooks run, its permissions are rules",
    )
    parser.add_argument(
        "--rules",
        action="append",
        metavar="FILE",
        help="a rules file (TOML, or a Claude Code settings .json; repeatable): deny rules "
        "reject, allow rules allow, before the client is asked (broker rules check FILE)",
    )
    parser.add_argument(
        "--permission-deadline",
        type=positive_seconds,
        help="seconds to wait for the client's permission answer (default 300)",
    )
    parser.add_argument(
        "--allow-always",
        action="store_true",
        default=None,
        help="offer and honour an 'Always allow' option (a remembered grant per tool)",
    )
    parser.add_argument(
        "--always-for",
        type=duration,
        metavar="DURATION",
        help="how long a grant given by 'Always allow' lasts: 90s, 30m, 2h, 1d (default: as "
        "long as the session); broker grants revoke ends one sooner",
    )
    parser.add_argument(
        "--project-rules",
        metavar="FILE",
        help="the project's rules file: loaded as rules (when it exists), and where an answer "
        "'Always allow … in this project' appends its rule (offered with --allow-always)",
    )
    parser.add_argument(
        "--remote-answers",
        action="store_true",
        default=None,
        help="let questions also be answered from elsewhere while the client is asked "
        "(broker pending / broker answer STORE ...; the first answer wins)",
    )
    parser.add_argument(
        "--inbox",
        type=port_number,
        metavar="PORT",
        help="also serve the web inbox on 127.0.0.1:PORT (0: any free port; implies "
        "--remote-answers); its address, with a new token, goes to stderr",
    )
    parser.add_argument("--log-file", type=pathlib.Path, help="write logs here, not to stderr")
    parser.add_argument(
        "--trace-frames",
        type=pathlib.Path,
        help='append every JSON-RPC frame, as {"dir": "sent"|"received", "frame": …} '
        "lines, to this file (for snapshots and schema checks)",
    )
    parser.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin; returns the exit status."""
    handler: logging.Handler = (
        logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    )
    logging.basicConfig(
        level=args.log_level, handlers=[handler], format="%(asctime)s %(name)s %(message)s"
    )
    try:
        composition = Composition.load(
            args.config,
            default_store=_default_store(),
            policy=args.policy,
            sandbox=args.sandbox,
            scenario=args.scenario,
            store=args.store,
            hooks=args.hooks,
            rules=args.rules,
            permission_deadline=args.permission_deadline,
            allow_always=args.allow_always,
            always_for=args.always_for,
            project_rules=args.project_rules,
            remote_answers=True if args.inbox is not None else args.remote_answers,
        )
    except (CompositionError, ScenarioError, HookSettingsError) as exc:
        print(f"broker acp: {exc}", file=sys.stderr)
        return 2
    with export_from_env("acp"):  # OpenTelemetry, when the OTEL_* variables ask for it
        return trio.run(
            run_until_signalled, "acp", _serve, composition, args.trace_frames, args.inbox
        )


def _default_store() -> pathlib.Path:
    state = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local" / "state")
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return pathlib.Path(state) / "broker" / f"acp-{stamp}-{os.getpid()}.sqlite"


@attrs.define(eq=False)
class _FrameTrace:
    """Writes each frame as one JSON line, flushed, so a killed process leaves whole lines."""

    file: IO[str]

    def __call__(self, frame: Frame) -> None:
        direction = "sent" if frame.direction is Direction.SENT else "received"
        self.file.write(json.dumps({"dir": direction, "frame": frame.message}) + "\n")
        self.file.flush()


async def _serve(
    composition: Composition, trace: pathlib.Path | None = None, inbox: int | None = None
) -> int:
    try:
        executor = await composition.executor()
    except SandboxUnavailableError as exc:
        print(f"broker acp: {exc}", file=sys.stderr)
        await trio.lowlevel.checkpoint()
        return 2
    store = composition.store
    if isinstance(store, pathlib.Path):
        await trio.to_thread.run_sync(make_private_dirs, store.parent)
        logging.getLogger("broker.acp").info("session log: %s", store)
    elif store is not None:  # a PostgreSQL URL: never log its password
        logging.getLogger("broker.acp").info("session log: %s", redact_dsn(store))
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    stdout = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))
    with contextlib.ExitStack() as files:
        hook = None
        if trace is not None:
            hook = _FrameTrace(files.enter_context(trace.open("a", encoding="utf-8")))
        connection = JsonRpcConnection(send_stream=stdout, receive_stream=stdin, on_frame=hook)
        async with open_broker(
            policy=composition.policy,
            delegation=composition.delegation,
            store=composition.store,
            rules=composition.rules,
            project_rules=composition.project_rules,
        ) as broker:
            serving = partial(serve_acp, connection, broker, composition, executor)
            await (serving() if inbox is None else with_inbox(broker, inbox, serving))
    return 0
