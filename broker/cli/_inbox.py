"""broker inbox STORE: the web approval inbox, as its own process beside the asking ones.

examples:
  broker inbox logs/sessions.sqlite                 serve http://127.0.0.1:8765/?token=…
  broker inbox logs/sessions.sqlite --port 0        any free port (printed)
  broker inbox logs/sessions.sqlite --token-file ~/.config/broker/inbox-token

The page lists the questions waiting for an answer from elsewhere — those of every process whose
broker has a remote answerer in its waterfall (broker.remote_answerer()) on this store — live,
and answers them with one click: Allow once or Reject, recorded with your name as answeredBy.

Who may answer: the inbox listens on 127.0.0.1 unless --bind says otherwise; every request must
carry the token (printed at start, or read from --token-file): the printed address carries it
once, the browser keeps a cookie after that; every answer also carries the page's CSRF token.

Exit status: 130/143 stopped by SIGINT/SIGTERM; 2 it could not start (the store, the port, the
token file).
"""

from __future__ import annotations

import argparse
import ipaddress
import pathlib
import secrets
import signal
import sys
from functools import partial
from typing import TYPE_CHECKING

import trio

from .._collapse import collapse_single
from .._private_files import check_secret_file, create_private_file
from ..store import board_for
from ..telemetry import export_from_env
from ._errors import CliError
from ._numbers import integer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._broker import Broker
    from ..store import AnswerBoard

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["port_number", "register", "with_inbox"]


def register(sub: _Sub) -> None:
    """Add the ``inbox`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "inbox",
        help="serve the web approval inbox: answer pending questions from a browser",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("store", help="the store: a file path, sqlite:///PATH or postgresql://…")
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address to listen on (default 127.0.0.1: this host only)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=8765,
        help="the port to listen on (default 8765; 0: any free port)",
    )
    parser.add_argument(
        "--token-file",
        type=pathlib.Path,
        metavar="FILE",
        help="read the token from FILE, which must be yours and not readable by others (as "
        "ssh requires of a key); a missing FILE is created (0600) with a new token "
        "(default: a new random token, printed)",
    )
    parser.set_defaults(func=run)


def port_number(text: str) -> int:
    """A TCP port for argparse: 0 (any free port) to 65535."""
    value = integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be from 0 to 65535 (0: any free port), got {value}")
    return value


def _token(path: pathlib.Path | None) -> str:
    if path is None:
        return secrets.token_urlsafe(32)
    try:
        if create_private_file(path, warn=False):  # new: 0600 whatever the umask, a new token
            token = secrets.token_urlsafe(32)
            path.write_text(token + "\n", encoding="utf-8")
            return token
        check_secret_file(path, "--token-file")
        text = path.read_text(encoding="utf-8").strip()
    except PermissionError as exc:
        raise CliError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise CliError(f"--token-file {path}: not UTF-8 text ({exc.reason})") from exc
    from ..inbox import check_token

    try:
        return check_token(text, parameter=f"--token-file {path}: the token")
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status."""
    token = _token(args.token_file)
    board = board_for(args.store)
    with export_from_env("inbox"):  # OpenTelemetry, when the OTEL_* variables ask for it
        return trio.run(_main, args, board, token)


async def _main(args: argparse.Namespace, board: AnswerBoard, token: str) -> int:
    # Imported here: the other commands need not load the web server.
    from ..inbox import InboxListenError, serve_inbox

    await board.pending()  # a store that cannot be opened stops here, with its one line
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals, collapse_single():
        async with trio.open_nursery() as nursery:
            try:
                port = await nursery.start(
                    partial(serve_inbox, board, token=token, host=args.bind, port=args.port)
                )
            except InboxListenError as exc:
                raise CliError(f"--bind {args.bind} --port {args.port}: {exc.strerror}") from None
            host = f"[{args.bind}]" if ":" in args.bind else args.bind
            shown = "<the token in --token-file>" if args.token_file else token
            print(f"broker inbox: http://{host}:{port}/?token={shown}", flush=True)
            print(f"broker inbox: answering questions on {args.store}; Ctrl-C stops", flush=True)
            if not _loopback(args.bind):
                print(
                    f"broker inbox: listening on {args.bind}: anyone who can reach it and has "
                    "the token can answer, and plain HTTP is not encrypted (put TLS in front)",
                    file=sys.stderr,
                )
            async for signum in signals:
                nursery.cancel_scope.cancel(reason=f"{signal.Signals(signum).name} received")
                break
    name = signal.Signals(signum).name
    print(f"broker inbox: {name} received: stopped", file=sys.stderr)
    return 128 + signum


async def with_inbox(broker: Broker, port: int, work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work()`` with *broker*'s inbox served on 127.0.0.1:*port* (``broker acp
    --inbox``); its address, with a new token, goes to stderr (stdout may be a protocol).

    Cancellation: the inbox stops with the work.
    """
    from ..inbox import InboxListenError, serve_inbox

    token = secrets.token_urlsafe(32)
    with collapse_single():
        async with trio.open_nursery() as nursery:
            try:
                bound = await nursery.start(partial(serve_inbox, broker, token=token, port=port))
            except InboxListenError as exc:
                raise CliError(f"--inbox {port}: {exc.strerror}") from None
            print(f"broker inbox: http://127.0.0.1:{bound}/?token={token}", file=sys.stderr)
            await work()
            nursery.cancel_scope.cancel(reason="the work beside the inbox ended")


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
