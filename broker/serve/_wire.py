"""The frames of ``broker serve``'s socket: one JSON line in (a hook's question), one out.

Synopsis::

    question = read_question(b'{"v": 1, "agent": "claude-code", "event": "PreToolUse", ...}')
    line = reply_line(Reply(outcome=Outcome.REJECTED, message="denied by project rule 2 ..."))

Everything in a question comes from a process of the service's own user, but what it carries
(the command, the arguments, the session id) comes from a model: every field is checked for
type and size, and an unknown field is refused, so a frame that is not a question is never
half-read as one (:class:`FrameError` names the field).
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .._vocabulary import Outcome

__all__ = ["MAX_FRAME", "FrameError", "Question", "Reply", "read_question", "reply_line"]

#: The longest question line read (a tool's arguments included).
MAX_FRAME = 1 << 20
#: The agents whose hooks ask (the name on the hook's command line).
AGENTS = {"claude-code": "Claude Code", "codex": "Codex"}
_EVENTS = ("PreToolUse", "PermissionRequest")
_KEYS = frozenset(
    {"v", "agent", "event", "session", "tool", "arguments", "callId", "cwd", "timeoutMs"}
)


class FrameError(ValueError):
    """A line that is not a question this service answers; the message names the field."""


@attrs.frozen(kw_only=True)
class Question:
    """A hook's question: which agent and event, the agent's own session id, the tool and its
    exact arguments, the call's id and working directory, and how long the hook waits."""

    agent: str
    event: str
    session: str
    tool: str
    arguments: dict[str, Any]
    call_id: str | None = None
    cwd: str | None = None
    timeout_ms: int | None = None

    @property
    def agent_name(self) -> str:
        """How people call the agent (``Claude Code``)."""
        return AGENTS[self.agent]


@attrs.frozen(kw_only=True)
class Reply:
    """The service's answer: the outcome, what the model reads, and what decided it."""

    outcome: Outcome
    message: str
    source: str | None = None
    question: str | None = None


def _text(data: dict[str, Any], key: str, limit: int, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > limit or "\x00" in value:
        raise FrameError(f"{key} must be a non-empty string of at most {limit} characters")
    return value


def read_question(line: bytes) -> Question:
    """*line* as a :class:`Question`, or :class:`FrameError` naming what is wrong."""
    if len(line) > MAX_FRAME:
        raise FrameError(f"a question is at most {MAX_FRAME} bytes")
    try:
        data = json.loads(line)
    except RecursionError:
        raise FrameError("a question is nested too deeply to be read") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"a question is one JSON object per line ({exc})") from None
    if not isinstance(data, dict):
        raise FrameError("a question is a JSON object")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise FrameError(f"unknown field {unknown[0]!r}: a question has {', '.join(sorted(_KEYS))}")
    if data.get("v") != 1:
        raise FrameError(f"v must be 1 (this service's frame version), got {data.get('v')!r}")
    agent = _text(data, "agent", 32, required=True)
    if agent not in AGENTS:
        raise FrameError(f"agent must be one of {', '.join(sorted(AGENTS))}, got {agent!r}")
    event = _text(data, "event", 64, required=True)
    if event not in _EVENTS:
        raise FrameError(f"event must be PreToolUse or PermissionRequest, got {event!r}")
    arguments = data.get("arguments", {})
    if not isinstance(arguments, dict):
        raise FrameError("arguments must be a JSON object")
    timeout_ms = data.get("timeoutMs")
    if timeout_ms is not None and (
        isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms <= 0
    ):
        raise FrameError(f"timeoutMs must be a positive whole number, got {timeout_ms!r}")
    session = _text(data, "session", 512, required=True)
    tool = _text(data, "tool", 256, required=True)
    assert session is not None
    assert tool is not None
    return Question(
        agent=agent,
        event=event,
        session=session,
        tool=tool,
        arguments=arguments,
        call_id=_text(data, "callId", 512, required=False),
        cwd=_text(data, "cwd", 4096, required=False),
        timeout_ms=timeout_ms,
    )


def reply_line(reply: Reply) -> bytes:
    """*reply* as one JSON line."""
    data = {
        "outcome": reply.outcome.value,
        "message": reply.message,
        "source": reply.source,
        "question": reply.question,
    }
    return json.dumps(data, ensure_ascii=True).encode() + b"\n"


def error_line(message: str) -> bytes:
    """The reply to a frame that is not a question: ``unavailable``, naming why."""
    return reply_line(Reply(outcome=Outcome.UNAVAILABLE, message=message))
