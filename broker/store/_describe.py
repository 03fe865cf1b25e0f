"""One line per event of a session's timeline, in the words of ``broker log show``: asked and
decided paired (where the decision is, how long it took, who answered), turns, policy and
grants. The CLI prints it in aligned columns; the web inbox shows the same words unaligned.
Nothing here escapes: callers pass the line through :func:`broker._display.printable`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    ApprovalRevoke,
    TurnEnd,
    TurnStart,
)

if TYPE_CHECKING:
    from ._logtools import TimelineEntry

__all__ = ["describe_entry", "describe_source", "seconds"]


def seconds(ms: int) -> str:
    """*ms* as seconds with three decimals (``1.234s``)."""
    return f"{ms / 1000:.3f}s"


def describe_entry(entry: TimelineEntry, *, aligned: bool = False) -> str:
    """The line for *entry*; with *aligned*, the approval verbs are padded to one column."""
    event = entry.event
    if isinstance(event, TurnStart):
        return f"turn {event.turn} started"
    if isinstance(event, TurnEnd):
        return f"turn {event.turn} ended: {event.reason.kind}"
    if isinstance(event, ApprovalAsked):
        verb, text = "asked", _asked(entry, event)
    elif isinstance(event, ApprovalDecided):
        verb, text = "decided", _decided(entry, event)
    elif isinstance(event, ApprovalPolicy):
        source = "" if event.source is None else f" (source {event.source})"
        verb, text = "policy", f"{event.policy}{source}"
    elif isinstance(event, ApprovalGrant):
        verb, text = "grant", _grant(event)
    elif isinstance(event, ApprovalRevoke):
        what = event.id if event.id is not None else f"tool {event.tool_name}"
        how = "expired" if event.expired else "revoked"
        by = f" by {event.by}" if event.by is not None else ""
        verb, text = how, f"grant {what}{by}"
    else:
        return event.TYPE
    return f"{verb:<7} {text}" if aligned else f"{verb} {text}"


def _grant(event: ApprovalGrant) -> str:
    text = f"tool {event.tool_name}"
    if event.command is not None:
        text += f" command {event.command!r}"
    if event.id is not None:
        text += f" id {event.id}"
    if event.by is not None:
        text += f" by {event.by}"
    if event.expires_at_ms is not None:
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event.expires_at_ms / 1000))
        text += f" until {until}"
    if event.rule_file is not None:
        text += f" remembered in {event.rule_file}"
    return text


def _asked(entry: TimelineEntry, event: ApprovalAsked) -> str:
    text = f"{event.id} tool {event.tool_name}"
    if event.call_id is not None:
        text += f" call {event.call_id}"
    if event.reason is not None:
        text += f" ({event.reason})"
    if entry.pair_seq is None:
        return text + " -> pending (no decision)"
    if entry.duration_ms is None:
        return text + f" -> decided at #{entry.pair_seq}"
    return text + f" -> decided at #{entry.pair_seq} after {seconds(entry.duration_ms)}"


def describe_source(event: ApprovalDecided) -> str | None:
    """What decided, in words: ``rule: project rule 2 of rules.toml``, ``grant: tool bash``,
    ``answerer: acp``, ``deadline: board``, ``no-answerer``... ``None`` for a decision logged
    before sources were recorded."""
    source = event.source
    if source is None:
        return None
    if event.rule_layer is not None:
        where = f" of {event.rule_file}" if event.rule_file is not None else ""
        return f"{source}: {event.rule_layer} rule {event.rule_index}{where}"
    if event.grant is not None:
        return f"{source}: tool {event.grant}"
    if event.answerer is not None:
        return f"{source}: {event.answerer}"
    return str(source)


def _decided(entry: TimelineEntry, event: ApprovalDecided) -> str:
    flags = [
        flag
        for flag, on in (
            ("remembered", event.remembered),
            (f"policy {event.policy}", event.policy is not None),
            ("recovered", event.recovered),
        )
        if on
    ]
    text = f"{event.id} {event.outcome}"
    if event.answered_by is not None:
        text += f" by {event.answered_by}"
    source = describe_source(event)
    if source is not None:
        flags.insert(0, source)
    if flags:
        text += " [" + ", ".join(flags) + "]"
    if event.message is not None:
        text += f" saying {event.message!r}"
    if event.answers is not None:
        text += f" — answers: {event.answers}"
    if entry.pair_seq is None:
        return text + " (no matching ask)"
    if entry.duration_ms is None:
        return text + f" (ask at #{entry.pair_seq})"
    return text + f" (asked at #{entry.pair_seq}, {seconds(entry.duration_ms)})"
