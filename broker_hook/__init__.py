"""``broker hook claude-code|codex``: the command an agent's hook runs to ask ``broker serve``.

Synopsis (a Claude Code settings file)::

    {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": "broker hook claude-code", "timeout": 60}]}]}}

It reads the agent's hook input on stdin, asks the service over its Unix socket
(:mod:`._client`), and prints the agent's answer (:mod:`._formats`). It never fails open: no
service, a bad input, a bad reply, no answer within ``--timeout`` (keep it below the hook's own
timeout), or any error of its own is answered as a refusal naming the cause and the fix.

This package imports nothing but the standard library, and nothing of :mod:`broker` (whose
import costs ten times a bare interpreter's start): a hook is a new process on every tool
call, so what it imports is most of what it costs.
"""

from __future__ import annotations

import json
import sys

from ._client import ServiceError, ask, default_socket_path
from ._formats import AGENTS, EVENTS, HookInputError, answer, read_input

TYPE_CHECKING = False
if TYPE_CHECKING:  # not imported at run time: typing alone costs a hook ~3 ms
    from typing import Any

__all__ = ["DEFAULT_TIMEOUT", "default_socket_path", "run"]

#: Seconds the hook waits for the service (below the agents' own hook timeouts).
DEFAULT_TIMEOUT = 50.0
#: The exit status both agents read as "blocked" (with the reason on stderr).
EXIT_BLOCK = 2


USAGE = """\
usage: broker hook {claude-code,codex} [--socket PATH] [--timeout SECONDS]

Answer an agent's hook by asking broker serve; never fails open.

  claude-code|codex   the agent whose hook runs this
  --socket PATH       the service's socket (default: $BROKER_SOCKET, else
                      $XDG_RUNTIME_DIR/broker/serve.sock, else /tmp/broker-UID/serve.sock)
  --timeout SECONDS   wait this long for an answer, then refuse (default 50; keep it below
                      the hook's own timeout)
"""


class UsageError(Exception):
    """A command line this hook cannot run with (the message names the argument)."""


def parse_args(argv: list[str]) -> tuple[str, str | None, float]:
    """*argv* (after ``hook``) as (agent, socket or None, timeout). Hand-written rather than
    argparse, whose import (with :mod:`re`'s compiler) costs a hook a third of its start."""
    agent: str | None = None
    sock: str | None = None
    timeout = DEFAULT_TIMEOUT
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, has_value, value = arg.partition("=")
        if name in ("--socket", "--timeout"):
            if not has_value:
                if not rest:
                    raise UsageError(f"argument {name}: expected a value")
                value = rest.pop(0)
            if name == "--socket":
                sock = value
            else:
                try:
                    timeout = float(value)
                except ValueError:
                    raise UsageError(f"argument --timeout: not a number: {value!r}") from None
        elif arg in AGENTS and agent is None:
            agent = arg
        else:
            raise UsageError(
                f"unexpected argument {arg!r}: name the agent (claude-code or codex), then "
                "--socket PATH or --timeout SECONDS"
            )
    if agent is None:
        raise UsageError("the agent is missing: broker hook claude-code, or broker hook codex")
    return agent, sock, timeout


def _event_of(raw: bytes) -> str | None:
    """The hook's event, if it can be read at all (to refuse in that event's words)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    event = data.get("hook_event_name") if isinstance(data, dict) else None
    return event if event in EVENTS else None


def _refuse(agent: str, event: str | None, reason: str) -> int:
    text = f"broker: {reason}"
    shown = answer(agent, event, False, text) if event is not None else None
    if shown is None:
        sys.stderr.write(text + "\n")
        return EXIT_BLOCK
    sys.stdout.write(shown + "\n")
    return 0


def _question(agent: str, raw: bytes, timeout: float) -> dict[str, Any]:
    hook = read_input(raw)
    return {
        "v": 1,
        "agent": agent,
        "event": hook.event,
        "session": hook.session,
        "tool": hook.tool,
        "arguments": hook.arguments,
        "callId": hook.call_id,
        "cwd": hook.cwd,
        "timeoutMs": int(timeout * 1000),
    }


def run(argv: list[str]) -> int:
    """Run ``broker hook`` with *argv* (after ``hook``); the exit status."""
    if argv[:1] in (["-h"], ["--help"]):
        sys.stdout.write(USAGE)
        return 0
    try:
        agent, sock, timeout = parse_args(argv)
    except UsageError as exc:
        # No agent to answer in the words of: exit 2 blocks in both agents' hooks.
        sys.stderr.write(f"broker hook: {exc} (see broker hook --help)\n")
        return EXIT_BLOCK
    raw = b""
    try:
        raw = sys.stdin.buffer.read(1 << 21)
        if not 0 < timeout <= 3600:
            raise HookInputError(f"--timeout must be between 0 and 3600 seconds, got {timeout:g}")
        question = _question(agent, raw, timeout)
        reply = ask(sock or default_socket_path(), question, timeout)
        outcome = reply.get("outcome")
        message = reply.get("message")
        if not isinstance(message, str) or not message:
            message = f"the approval service answered {outcome!r}"
        if outcome != "allowed-once":
            return _refuse(agent, question["event"], message)
        shown = answer(agent, question["event"], True, f"broker: {message}")
        if shown is not None:
            sys.stdout.write(shown + "\n")
        return 0
    except (HookInputError, ServiceError) as exc:
        return _refuse(agent, _event_of(raw), str(exc))
    except Exception as exc:  # never fail open, whatever went wrong
        return _refuse(agent, _event_of(raw), f"the hook failed ({type(exc).__name__}: {exc})")
