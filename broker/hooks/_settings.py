"""The ``PreToolUse`` section of a Claude Code settings file, parsed and checked at load time.

Only ``hooks.PreToolUse`` is read; every other top-level key and every other hook event is
ignored. Inside a matcher group only ``"type": "command"`` hooks are kept: other hook types
(``http``, ``prompt``, ``agent``, ``mcp_tool``) are skipped, and unknown keys of a command hook
(``if``, ``async``, ``statusMessage``...) are ignored. Anything malformed raises
:class:`HookSettingsError` naming the file, the JSON path and the fix.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    import os

__all__ = ["DEFAULT_TIMEOUT", "CommandHook", "HookMatcher", "HookSettings", "HookSettingsError"]

DEFAULT_TIMEOUT = 60.0
"""Seconds a command hook may run when its settings give no ``timeout`` (Claude Code's default)."""

_MATCH_ALL = (None, "", "*")
_MISSING = object()


class HookSettingsError(ValueError):
    """The settings file cannot be used: unreadable, not JSON, or a malformed hook entry."""


def _describe(value: object) -> str:
    """A short lower-case rendering of a JSON value for error messages."""
    if value is _MISSING:
        return "nothing"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _regex_problem(matcher: str) -> str | None:
    """Why *matcher* is not a usable regex, or ``None`` if it is (or matches everything)."""
    if matcher in _MATCH_ALL:
        return None
    try:
        re.compile(matcher)
    except re.error as exc:
        return str(exc)
    return None


def _is_positive_seconds(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@attrs.frozen(kw_only=True)
class CommandHook:
    """One ``{"type": "command"}`` hook: a ``bash -c`` command and its timeout in seconds."""

    command: str
    timeout: float = DEFAULT_TIMEOUT

    def __attrs_post_init__(self) -> None:
        if not self.command.strip():
            raise HookSettingsError("command must be a non-empty shell command")
        if not _is_positive_seconds(self.timeout):
            raise HookSettingsError(
                f"timeout must be a positive number of seconds, got {self.timeout!r}; "
                f"omit it for the default of {DEFAULT_TIMEOUT:g} seconds"
            )


@attrs.frozen(kw_only=True)
class HookMatcher:
    """A matcher group: which tools it applies to, and the command hooks to run for them.

    ``matcher`` omitted (``None``), ``""`` or ``"*"`` matches every tool; anything else is a
    Python regex that must match the *whole* tool name (``Edit|Write``, ``mcp__.*``).
    """

    matcher: str | None
    hooks: tuple[CommandHook, ...]

    def __attrs_post_init__(self) -> None:
        if self.matcher is not None and (problem := _regex_problem(self.matcher)) is not None:
            raise HookSettingsError(
                f"matcher {_describe(self.matcher)} is not a valid regex ({problem}); "
                'escape special characters, or use "*" to match every tool'
            )

    def matches(self, tool_name: str) -> bool:
        """Whether this group applies to *tool_name*."""
        if self.matcher in _MATCH_ALL:
            return True
        assert self.matcher is not None
        return re.fullmatch(self.matcher, tool_name) is not None


@attrs.frozen(kw_only=True)
class HookSettings:
    """The ``PreToolUse`` matcher groups of one settings file, in configuration order."""

    pre_tool_use: tuple[HookMatcher, ...] = ()

    def hooks_for(self, tool_name: str) -> tuple[CommandHook, ...]:
        """The command hooks that apply to *tool_name*, in configuration order.

        Identical hooks (same command and timeout) are run once, as Claude Code does.
        """
        found: dict[CommandHook, None] = {}
        for group in self.pre_tool_use:
            if group.matches(tool_name):
                found.update(dict.fromkeys(group.hooks))
        return tuple(found)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HookSettings:
        """Load and check a Claude Code settings file (``.claude/settings.json``)."""
        source = str(path)
        try:
            text = pathlib.Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise HookSettingsError(
                f"{source}: cannot read the settings file ({why.lower()}); "
                "check the path and its permissions"
            ) from exc
        try:
            obj: object = json.loads(text)
        except json.JSONDecodeError as exc:
            raise HookSettingsError(
                f"{source}: not valid json ({exc.msg.lower()} at line {exc.lineno} "
                f"column {exc.colno}); fix the json syntax"
            ) from exc
        return cls.from_json(obj, source=source)

    @classmethod
    def from_json(cls, obj: object, *, source: str) -> HookSettings:
        """Check already-decoded settings; *source* names them (a path) in error messages."""
        return cls(pre_tool_use=tuple(_parse(obj, source)))


def _error(source: str, path: str, problem: str, fix: str) -> HookSettingsError:
    return HookSettingsError(f"{source}: {path} {problem}; {fix}")


def _parse(obj: object, source: str) -> list[HookMatcher]:
    def fail(path: str, problem: str, fix: str) -> HookSettingsError:
        return _error(source, path, problem, fix)

    if not isinstance(obj, dict):
        raise fail(
            "the settings", f"must be a json object, got {_describe(obj)}", 'use {"hooks": {...}}'
        )
    hooks = obj.get("hooks")
    if hooks is None:
        return []
    if not isinstance(hooks, dict):
        raise fail(
            "hooks",
            f"must be an object keyed by hook event, got {_describe(hooks)}",
            'use {"PreToolUse": [...]}',
        )
    groups = hooks.get("PreToolUse")
    if groups is None:
        return []
    if not isinstance(groups, list):
        raise fail(
            "hooks.PreToolUse",
            f"must be a list of matcher groups, got {_describe(groups)}",
            'use [{"matcher": "Bash", "hooks": [...]}]',
        )
    parsed: list[HookMatcher] = []
    for i, group in enumerate(groups):
        where = f"hooks.PreToolUse[{i}]"
        if not isinstance(group, dict):
            raise fail(
                where,
                f"must be an object, got {_describe(group)}",
                'use {"matcher": "Bash", "hooks": [...]}',
            )
        matcher = group.get("matcher")
        if matcher is not None:
            if not isinstance(matcher, str):
                raise fail(
                    f"{where}.matcher",
                    f"must be a string, got {_describe(matcher)}",
                    'give a tool name or regex such as "Edit|Write", or "*" for every tool',
                )
            if (problem := _regex_problem(matcher)) is not None:
                raise fail(
                    f"{where}.matcher",
                    f"{_describe(matcher)} is not a valid regex ({problem})",
                    'escape special characters, or use "*" to match every tool',
                )
        entries = group.get("hooks", _MISSING)
        if not isinstance(entries, list):
            raise fail(
                f"{where}.hooks",
                f"must be a list of hooks, got {_describe(entries)}",
                'use [{"type": "command", "command": "..."}]',
            )
        commands: list[CommandHook] = []
        for j, entry in enumerate(entries):
            hook = _parse_hook(entry, source, f"{where}.hooks[{j}]")
            if hook is not None:
                commands.append(hook)
        parsed.append(HookMatcher(matcher=matcher, hooks=tuple(commands)))
    return parsed


def _parse_hook(entry: object, source: str, where: str) -> CommandHook | None:
    def fail(path: str, problem: str, fix: str) -> HookSettingsError:
        return _error(source, path, problem, fix)

    if not isinstance(entry, dict):
        raise fail(
            where,
            f"must be an object, got {_describe(entry)}",
            'use {"type": "command", "command": "..."}',
        )
    kind = entry.get("type", _MISSING)
    if not isinstance(kind, str):
        raise fail(
            f"{where}.type",
            f"must be a string, got {_describe(kind)}",
            'use "command" (other hook types are ignored)',
        )
    if kind != "command":
        return None
    command = entry.get("command", _MISSING)
    if not isinstance(command, str) or not command.strip():
        raise fail(
            f"{where}.command",
            f"must be a non-empty string, got {_describe(command)}",
            "give the shell command to run",
        )
    timeout = entry.get("timeout", DEFAULT_TIMEOUT)
    if not _is_positive_seconds(timeout):
        raise fail(
            f"{where}.timeout",
            f"must be a positive number of seconds, got {_describe(timeout)}",
            f"omit it for the default of {DEFAULT_TIMEOUT:g} seconds",
        )
    return CommandHook(command=command, timeout=float(timeout))
