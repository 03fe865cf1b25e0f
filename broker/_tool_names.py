"""Tool names across agents: this project's names and Claude Code's for the same tools.

A Claude Code settings file names ``Bash``, ``Read``, ``Write``; this project's tools are
``bash``, ``read``, ``write``. Hook matchers and permission rules see both names, so a Claude
Code user's file works unchanged.
"""

from __future__ import annotations

__all__ = ["CLAUDE_CODE_TOOLS", "claude_code_name", "tool_aliases"]

CLAUDE_CODE_TOOLS: dict[str, str] = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "multi_edit": "MultiEdit",
    "glob": "Glob",
    "grep": "Grep",
    "ls": "LS",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
    "notebook_edit": "NotebookEdit",
    "todo_write": "TodoWrite",
    "task": "Task",
}
"""This project's tool name -> Claude Code's name for the same tool; matchers see both."""

_OUR_NAMES = {claude: ours for ours, claude in CLAUDE_CODE_TOOLS.items()}


def claude_code_name(tool_name: str) -> str:
    """Claude Code's name for *tool_name* (``bash`` -> ``Bash``); unknown names unchanged."""
    return CLAUDE_CODE_TOOLS.get(tool_name, tool_name)


def tool_aliases(tool_name: str) -> tuple[str, ...]:
    """*tool_name* and its other names (at most two in all), *tool_name* first."""
    other = CLAUDE_CODE_TOOLS.get(tool_name) or _OUR_NAMES.get(tool_name)
    return (tool_name,) if other is None else (tool_name, other)
