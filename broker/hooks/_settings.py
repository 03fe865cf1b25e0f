"""The ``PreToolUse`` section of a Claude Code settings file, parsed and checked at load time.

Only ``hooks.PreToolUse`` is run. Inside a matcher group only ``"type": "command"`` hooks are
kept; unknown keys of a command hook (``if``, ``async``, ``statusMessage``...) are ignored.
Anything malformed raises :class:`HookSettingsError` naming the file, the JSON path and the fix.

What would silently run *fewer* hooks than the file intends is reported instead of ignored
(:meth:`HookSettings.check`, logged as warnings at load, ``broker hooks check FILE``): an
unknown event key (``PretoolUse``), an event this broker does not run, a hook type other than
``command``, a matcher that matches no registered tool. Matchers see Claude Code's tool names
(``Bash``, ``Read``, ``Write``...) as well as this project's (``bash``), so a Claude Code
settings file works unchanged.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import math
import pathlib
import re
import shlex
from typing import TYPE_CHECKING

import attrs

from .._errors import BrokerError
from .._tool_names import CLAUDE_CODE_TOOLS, claude_code_name

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable

__all__ = [
    "CLAUDE_CODE_TOOLS",
    "DEFAULT_TIMEOUT",
    "PROJECT_TOOLS",
    "CommandHook",
    "HookMatcher",
    "HookSettings",
    "HookSettingsError",
    "claude_code_name",
]

log = logging.getLogger("broker.hooks")

_OUR_NAMES = {claude: ours for ours, claude in CLAUDE_CODE_TOOLS.items()}


PROJECT_TOOLS: tuple[str, ...] = ("bash",)
"""The tools this project registers; a matcher that matches none of them is reported."""

_EVENTS_RUN = ("PreToolUse",)
_EVENTS_KNOWN = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PermissionRequest",
    "Notification",
    "UserPromptSubmit",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "SessionStart",
    "SessionEnd",
)
_PROJECT_DIR_VARS = ("${CLAUDE_PROJECT_DIR}", "$CLAUDE_PROJECT_DIR")
_SHELL_SYNTAX = frozenset("<>|;&`$()*?=")

DEFAULT_TIMEOUT = 60.0
"""Seconds a command hook may run when its settings give no ``timeout`` (Claude Code's default)."""

_MATCH_ALL = (None, "", "*")
_MISSING = object()


class HookSettingsError(BrokerError, ValueError):
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
    pins: tuple[tuple[str, str], ...] = ()
    """``(path, sha256 hex)`` of workspace files the command runs, fixed at load."""

    def changed_pin(self) -> str | None:
        """The first pinned path whose content is not what was loaded (or is gone), else None."""
        for path, digest in self.pins:
            try:
                current = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
            except OSError:
                return path
            if current != digest:
                return path
        return None

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
        """Whether this group applies to *tool_name* (this project's or Claude Code's name)."""
        if self.matcher in _MATCH_ALL:
            return True
        assert self.matcher is not None
        names = {tool_name, claude_code_name(tool_name), _OUR_NAMES.get(tool_name, tool_name)}
        return any(re.fullmatch(self.matcher, name) is not None for name in names)


@attrs.frozen(kw_only=True)
class HookSettings:
    """The ``PreToolUse`` matcher groups of one settings file, in configuration order."""

    pre_tool_use: tuple[HookMatcher, ...] = ()
    source: str = attrs.field(default="settings", eq=False)
    problems: tuple[str, ...] = attrs.field(default=(), eq=False)
    """What the file asks for that is not run (unknown events, hook types), found at load."""
    # workspace -> these settings pinned there, the first time it was asked: every session
    # built from one loaded file keeps the hashes of the first pinning (load time), so a
    # script changed by an earlier session is not re-trusted by the next one.
    _pinned: dict[pathlib.Path, HookSettings] = attrs.field(
        factory=dict, eq=False, init=False, repr=False
    )

    def check(self, tools: Iterable[str] = PROJECT_TOOLS) -> tuple[str, ...]:
        """Every way this file would run fewer hooks than it says; empty when none.

        Adds, to :attr:`problems`, each matcher that matches none of *tools*.
        """
        names = tuple(tools)
        found = list(self.problems)
        for i, group in enumerate(self.pre_tool_use):
            if group.hooks and not any(group.matches(name) for name in names):
                known = ", ".join(
                    f"{n} ({CLAUDE_CODE_TOOLS[n]})" if n in CLAUDE_CODE_TOOLS else n for n in names
                )
                found.append(
                    f"{self.source}: hooks.PreToolUse[{i}].matcher {_describe(group.matcher)} "
                    f"matches no registered tool, so its hooks never run; the tools are {known}"
                )
        return tuple(found)

    def pinned(self, workspace: str | os.PathLike[str]) -> HookSettings:
        """These settings with every workspace file a hook command runs pinned by sha256.

        A command token that names a file inside *workspace* (relative to it, absolute, or
        through ``$CLAUDE_PROJECT_DIR``) is hashed the first time this is called for
        *workspace* on these settings (later calls return that same pinning); the hook is
        denied, not run, if that file changes afterwards. A token naming a path inside the
        workspace that does not exist raises :class:`HookSettingsError` (the model could
        create it).
        """
        root = pathlib.Path(workspace).resolve()
        if (known := self._pinned.get(root)) is not None:
            return known
        groups = []
        for i, group in enumerate(self.pre_tool_use):
            hooks = []
            for j, hook in enumerate(group.hooks):
                where = f"{self.source}: hooks.PreToolUse[{i}].hooks[{j}].command"
                hooks.append(attrs.evolve(hook, pins=_pins(hook.command, root, where)))
            groups.append(attrs.evolve(group, hooks=tuple(hooks)))
        pinned = attrs.evolve(self, pre_tool_use=tuple(groups))
        self._pinned[root] = pinned
        pinned._pinned[root] = pinned
        return pinned

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
        """Check already-decoded settings; *source* names them (a path) in error messages.

        Each problem :meth:`check` finds is logged as a warning on ``broker.hooks``.
        """
        problems: list[str] = []
        settings = cls(
            pre_tool_use=tuple(_parse(obj, source, problems)),
            source=source,
            problems=tuple(problems),
        )
        for problem in settings.check():
            log.warning("%s", problem)
        return settings


def _error(source: str, path: str, problem: str, fix: str) -> HookSettingsError:
    return HookSettingsError(f"{source}: {path} {problem}; {fix}")


def _pins(command: str, root: pathlib.Path, where: str) -> tuple[tuple[str, str], ...]:
    """``(path, sha256)`` for each file inside *root* that *command* names."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return ()  # unbalanced quotes: bash fails on it too, and a failing hook denies
    pins: dict[str, str] = {}
    for token in tokens:
        for var in _PROJECT_DIR_VARS:
            token = token.replace(var, str(root))
        if token.startswith("-") or any(c in token for c in _SHELL_SYNTAX):
            continue  # an option, a redirection or an unexpanded word: not a script path
        candidate = root / token  # an absolute token replaces root
        if "/" not in token and not candidate.is_file():
            continue
        path = candidate.resolve()
        if not path.is_relative_to(root) or path == root:
            continue
        if not path.exists():
            raise HookSettingsError(
                f"{where} refers to {str(path)!r} inside the workspace, which does not exist; "
                "create the script before loading the settings (it is pinned by content then) "
                "or keep hook scripts outside the workspace"
            )
        if path.is_file():
            pins[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return tuple(pins.items())


def _parse(obj: object, source: str, problems: list[str]) -> list[HookMatcher]:
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
    for event in hooks:
        if event in _EVENTS_RUN:
            continue
        if event in _EVENTS_KNOWN:
            problems.append(
                f"{source}: hooks.{event} is not run by this broker (only PreToolUse is); "
                "its hooks never run"
            )
            continue
        close = difflib.get_close_matches(str(event), _EVENTS_KNOWN, n=1, cutoff=0.6)
        hint = f'; did you mean "{close[0]}"?' if close else ""
        problems.append(
            f"{source}: hooks.{event} is not a hook event, so its hooks never run{hint}"
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
            hook = _parse_hook(entry, source, f"{where}.hooks[{j}]", problems)
            if hook is not None:
                commands.append(hook)
        parsed.append(HookMatcher(matcher=matcher, hooks=tuple(commands)))
    return parsed


def _parse_hook(entry: object, source: str, where: str, problems: list[str]) -> CommandHook | None:
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
        problems.append(
            f"{source}: {where}.type is {_describe(kind)}, which this broker does not run "
            '(only "command" hooks run); this hook never runs'
        )
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
