"""Loading the PreToolUse section of a Claude Code settings file, and its load-time errors."""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

import pytest

from broker.hooks import CommandHook, HookMatcher, HookSettings, HookSettingsError

if TYPE_CHECKING:
    import pathlib

SRC = "/p/settings.json"


def _group(**fields: object) -> dict[str, object]:
    return {"hooks": {"PreToolUse": [fields]}}


def test_from_file_reads_command_hooks_in_order(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash"]},
                "hooks": {
                    "PostToolUse": [{"hooks": [{"type": "command", "command": "ignored"}]}],
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [
                                {"type": "command", "command": "a.sh", "timeout": 5},
                                {"type": "prompt", "prompt": "is this ok?"},
                                {"type": "command", "command": "b.sh", "if": "Bash(rm *)"},
                            ],
                        },
                        {"hooks": [{"type": "command", "command": "c.sh", "timeout": 0.5}]},
                    ],
                },
            }
        )
    )
    settings = HookSettings.from_file(path)
    assert settings == HookSettings(
        pre_tool_use=(
            HookMatcher(
                matcher="Bash",
                hooks=(CommandHook(command="a.sh", timeout=5.0), CommandHook(command="b.sh")),
            ),
            HookMatcher(matcher=None, hooks=(CommandHook(command="c.sh", timeout=0.5),)),
        )
    )
    assert settings.pre_tool_use[0].hooks[1].timeout == 60.0


@pytest.mark.parametrize("obj", [{}, {"hooks": {}}, {"hooks": {"Stop": []}}, {"model": "x"}])
def test_no_pre_tool_use_section_is_empty(obj: object) -> None:
    assert HookSettings.from_json(obj, source=SRC) == HookSettings(pre_tool_use=())


@pytest.mark.parametrize(
    ("matcher", "tool", "expected"),
    [
        (None, "Bash", True),
        ("", "anything", True),
        ("*", "mcp__srv__tool", True),
        ("Bash", "Bash", True),
        ("Bash", "BashOutput", False),
        ("Edit|Write", "Write", True),
        ("Edit|Write", "MultiEdit", False),
        ("mcp__.*", "mcp__github__search", True),
        ("mcp__.*", "Read", False),
    ],
)
def test_matcher_fullmatches_the_tool_name(matcher: str | None, tool: str, expected: bool) -> None:
    assert HookMatcher(matcher=matcher, hooks=()).matches(tool) is expected


def test_hooks_for_keeps_config_order_and_runs_identical_hooks_once() -> None:
    settings = HookSettings.from_json(
        {
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": "one"}]},
                    {"matcher": "Read", "hooks": [{"type": "command", "command": "never"}]},
                    {
                        "matcher": "*",
                        "hooks": [
                            {"type": "command", "command": "two"},
                            {"type": "command", "command": "one"},
                        ],
                    },
                ]
            }
        },
        source=SRC,
    )
    assert [h.command for h in settings.hooks_for("Bash")] == ["one", "two"]


def test_not_json_names_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"hooks": ')
    expected = f"{path}: not valid json (expecting value at line 1 column 11); fix the json syntax"
    with pytest.raises(HookSettingsError, match=rf"^{re.escape(expected)}$"):
        HookSettings.from_file(path)


def test_missing_file_names_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nope.json"
    expected = (
        f"{path}: cannot read the settings file (no such file or directory); "
        "check the path and its permissions"
    )
    with pytest.raises(HookSettingsError, match=rf"^{re.escape(expected)}$"):
        HookSettings.from_file(path)


_CMD = {"type": "command", "command": "x.sh"}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ([], 'the settings must be a json object, got a list; use {"hooks": {...}}'),
        (
            {"hooks": []},
            'hooks must be an object keyed by hook event, got a list; use {"PreToolUse": [...]}',
        ),
        (
            {"hooks": {"PreToolUse": {"matcher": "Bash"}}},
            "hooks.PreToolUse must be a list of matcher groups, got an object; "
            'use [{"matcher": "Bash", "hooks": [...]}]',
        ),
        (
            {"hooks": {"PreToolUse": ["Bash"]}},
            'hooks.PreToolUse[0] must be an object, got "Bash"; '
            'use {"matcher": "Bash", "hooks": [...]}',
        ),
        (
            _group(matcher=3, hooks=[_CMD]),
            "hooks.PreToolUse[0].matcher must be a string, got 3; "
            'give a tool name or regex such as "Edit|Write", or "*" for every tool',
        ),
        (
            _group(matcher="Bash(", hooks=[_CMD]),
            'hooks.PreToolUse[0].matcher "Bash(" is not a valid regex '
            "(missing ), unterminated subpattern at position 4); "
            'escape special characters, or use "*" to match every tool',
        ),
        (
            _group(matcher="Bash"),
            "hooks.PreToolUse[0].hooks must be a list of hooks, got nothing; "
            'use [{"type": "command", "command": "..."}]',
        ),
        (
            _group(hooks=[_CMD, "x.sh"]),
            'hooks.PreToolUse[0].hooks[1] must be an object, got "x.sh"; '
            'use {"type": "command", "command": "..."}',
        ),
        (
            _group(hooks=[{"command": "x.sh"}]),
            "hooks.PreToolUse[0].hooks[0].type must be a string, got nothing; "
            'use "command" (other hook types are ignored)',
        ),
        (
            _group(hooks=[_CMD, {"type": "command"}]),
            "hooks.PreToolUse[0].hooks[1].command must be a non-empty string, got nothing; "
            "give the shell command to run",
        ),
        (
            _group(hooks=[{"type": "command", "command": None}]),
            "hooks.PreToolUse[0].hooks[0].command must be a non-empty string, got null; "
            "give the shell command to run",
        ),
        (
            _group(hooks=[{"type": "command", "command": "  "}]),
            'hooks.PreToolUse[0].hooks[0].command must be a non-empty string, got "  "; '
            "give the shell command to run",
        ),
        (
            _group(hooks=[_CMD, {"type": "command", "command": "y", "timeout": -1}]),
            "hooks.PreToolUse[0].hooks[1].timeout must be a positive number of seconds, "
            "got -1; omit it for the default of 60 seconds",
        ),
        (
            _group(hooks=[{"type": "command", "command": "y", "timeout": 0}]),
            "hooks.PreToolUse[0].hooks[0].timeout must be a positive number of seconds, "
            "got 0; omit it for the default of 60 seconds",
        ),
        (
            _group(hooks=[{"type": "command", "command": "y", "timeout": "5"}]),
            "hooks.PreToolUse[0].hooks[0].timeout must be a positive number of seconds, "
            'got "5"; omit it for the default of 60 seconds',
        ),
        (
            _group(hooks=[{"type": "command", "command": "y", "timeout": True}]),
            "hooks.PreToolUse[0].hooks[0].timeout must be a positive number of seconds, "
            "got true; omit it for the default of 60 seconds",
        ),
    ],
)
def test_bad_settings_name_the_file_path_and_fix(obj: object, expected: str) -> None:
    with pytest.raises(HookSettingsError, match=rf"^{re.escape(f'{SRC}: {expected}')}$"):
        HookSettings.from_json(obj, source=SRC)


def test_bad_settings_from_file_name_the_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(_group(matcher="Bash", hooks=[{"type": "command", "command": ""}])))
    expected = (
        f'{path}: hooks.PreToolUse[0].hooks[0].command must be a non-empty string, got ""; '
        "give the shell command to run"
    )
    with pytest.raises(HookSettingsError, match=rf"^{re.escape(expected)}$"):
        HookSettings.from_file(path)


def test_settings_error_is_a_value_error() -> None:
    assert issubclass(HookSettingsError, ValueError)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(HookSettingsError, match=r"^command must be a non-empty shell command$"):
        CommandHook(command="")
    with pytest.raises(
        HookSettingsError,
        match=r"^timeout must be a positive number of seconds, got -2\.0; "
        r"omit it for the default of 60 seconds$",
    ):
        CommandHook(command="x", timeout=-2.0)
    with pytest.raises(
        HookSettingsError,
        match=r'^matcher "\[" is not a valid regex \(unterminated character set at position 0\); '
        r'escape special characters, or use "\*" to match every tool$',
    ):
        HookMatcher(matcher="[", hooks=())


# --- issue 10: Claude Code names, load-time problems, pinned workspace scripts -------------


@pytest.mark.parametrize(
    ("matcher", "matches"),
    [("Bash", True), ("bash", True), ("Bash|Edit", True), ("B.*", True), ("Read", False)],
)
def test_matchers_see_claude_code_tool_names_too(matcher: str, matches: bool) -> None:
    group = HookMatcher(matcher=matcher, hooks=())
    assert group.matches("bash") is matches


def test_problems_are_not_part_of_equality() -> None:
    obj: dict[str, object] = {"hooks": {"PreToolUse": [], "Stopp": []}}
    loaded = HookSettings.from_json(obj, source="s.json")
    assert loaded == HookSettings()
    assert loaded.check() == (
        's.json: hooks.Stopp is not a hook event, so its hooks never run; did you mean "Stop"?',
    )


def test_pinned_hashes_workspace_scripts_and_skips_shell_syntax(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "guard.sh"
    script.write_text("exit 0\n")
    obj = {
        "hooks": {
            "PreToolUse": [
                {
                    "hooks": [
                        {"type": "command", "command": "bash guard.sh 2>/dev/null | cat -"},
                        {"type": "command", "command": "/bin/true --flag=$HOME/x"},
                    ]
                }
            ]
        }
    }
    pinned = HookSettings.from_json(obj, source="s.json").pinned(tmp_path)
    first, second = pinned.pre_tool_use[0].hooks
    digest = hashlib.sha256(b"exit 0\n").hexdigest()
    assert first.pins == ((str(script.resolve()), digest),)
    assert second.pins == ()
    assert first.changed_pin() is None
    script.write_text("exit 1\n")
    assert first.changed_pin() == str(script.resolve())
    script.unlink()
    assert first.changed_pin() == str(script.resolve())


def test_pinning_happens_once_per_loaded_settings_and_workspace(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "guard.sh"
    script.write_text("exit 0\n")
    obj: dict[str, object] = {
        "hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "bash guard.sh"}]}]}
    }
    loaded = HookSettings.from_json(obj, source="s.json")
    first = loaded.pinned(tmp_path)
    script.write_text("exit 1\n")  # as an earlier session could have
    again = loaded.pinned(tmp_path)  # a later session's gate over the same loaded file
    assert again is first
    assert again.pre_tool_use[0].hooks[0].changed_pin() == str(script.resolve())
