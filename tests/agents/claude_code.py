"""Run the real Claude Code CLI (pinned in ``tests/agents/claude-code/``) offline, headless.

``run_claude(workdir, api=..., settings=..., prompt=..., timeout=...)`` writes *settings* as
``workdir/.claude/settings.json`` (project settings: ``claude -p`` reads them, hooks included,
without any trust dialog) and runs ``claude -p PROMPT --output-format json`` in *workdir* with
a scratch ``HOME`` and ``TMPDIR`` next to it and the model API pointed at *api* (a
:class:`tests.agents.model_api.ScriptedAnthropic`). The environment is built from scratch (only
``PATH`` is inherited), so no real key, proxy or user config leaks in.

Offline: ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`` is the variable that matters (without
it the CLI resolves Anthropic hosts and sends ``HEAD /api/hello`` to the base URL);
``DISABLE_TELEMETRY``/``DISABLE_AUTOUPDATER`` are set too, belt and braces. Checked with strace:
with these set, the only ``connect()`` calls go to 127.0.0.1.

Install the CLI with ``cd tests/agents/claude-code && npm ci``; without it :func:`claude_binary`
raises (the tests fail, saying so; they never skip).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .model_api import ScriptedAnthropic

__all__ = ["CLAUDE_DIR", "CompletedRun", "claude_binary", "claude_env", "run_claude"]

CLAUDE_DIR = pathlib.Path(__file__).resolve().parent / "claude-code"
INSTALL_HINT = "cd tests/agents/claude-code && npm ci"


def claude_binary() -> pathlib.Path:
    """The pinned ``claude`` executable (the native binary npm's postinstall put in place)."""
    binary = CLAUDE_DIR / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        raise FileNotFoundError(f"the Claude Code CLI is not installed: run `{INSTALL_HINT}`")
    return binary


def pinned_version() -> str:
    """The exact version ``package.json`` pins."""
    package = json.loads((CLAUDE_DIR / "package.json").read_text(encoding="utf-8"))
    return str(package["dependencies"]["@anthropic-ai/claude-code"])


@dataclass
class CompletedRun:
    """One finished ``claude -p`` run."""

    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_time: float
    home: pathlib.Path

    @property
    def result(self) -> dict[str, Any]:
        """The ``--output-format json`` result object (the last JSON line of stdout)."""
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise ValueError(f"claude printed no result; stderr: {self.stderr[-2000:]}")
        value = json.loads(lines[-1])
        if not isinstance(value, dict):
            raise ValueError(f"unexpected result: {value!r}")
        return value

    def describe(self) -> str:
        """A failure message's context: the exit status and both streams' tails."""
        return (
            f"claude exited {self.returncode} after {self.wall_time:.1f}s\n"
            f"stdout: {self.stdout[-3000:]}\nstderr: {self.stderr[-3000:]}"
        )


def claude_env(api: ScriptedAnthropic, home: pathlib.Path, tmp: pathlib.Path) -> dict[str, str]:
    """The whole environment of an offline run against *api*."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": api.base_url,
        "ANTHROPIC_API_KEY": "test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


def run_claude(
    workdir: pathlib.Path,
    *,
    api: ScriptedAnthropic,
    settings: Mapping[str, Any],
    prompt: str,
    timeout: float = 60.0,
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> CompletedRun:
    """Run ``claude -p PROMPT --output-format json`` in *workdir*; see the module docstring.

    *extra_args* go after the fixed ones (e.g. ``["--permission-mode", "acceptEdits"]``);
    *extra_env* is laid over :func:`claude_env`. Raises :class:`subprocess.TimeoutExpired`
    when the CLI is still running after *timeout* seconds (it is killed).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir.parent / f"{workdir.name}-claude-home"
    tmp = workdir.parent / f"{workdir.name}-claude-tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    (workdir / ".claude").mkdir(exist_ok=True)
    (workdir / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2))
    env = claude_env(api, home, tmp)
    env.update(extra_env or {})
    argv = [str(claude_binary()), "-p", prompt, "--output-format", "json", *extra_args]
    started = time.monotonic()
    completed = subprocess.run(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return CompletedRun(
        argv=argv,
        returncode=completed.returncode,
        stdout=completed.stdout,
        stderr=completed.stderr,
        wall_time=time.monotonic() - started,
        home=home,
    )
