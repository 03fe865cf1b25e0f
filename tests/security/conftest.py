"""Shared fixtures of the security suite: the real bash tool behind the real tool runtime.

Every attack runs through ``ToolRuntime`` -> ``BashTool`` -> ``BubblewrapExecutor`` exactly as
an agent's call would, and the assertions look at the *host* afterwards. The suite runs as
whoever runs pytest (root on this project's machines and CI); ``test_unprivileged.py`` runs it
again as uid 65534 when started as root.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from typing import TYPE_CHECKING

import attrs
import pytest

from broker.tools import (
    BashTool,
    BubblewrapExecutor,
    CommandLimits,
    SandboxMode,
    SandboxUnavailableError,
    ToolCall,
    ToolResult,
    ToolRuntime,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

# Every test is bounded so a hang fails instead of stalling the suite.
BOUND = 30.0

RO = SandboxMode.READ_ONLY
WW = SandboxMode.WORKSPACE_WRITE
CONFINED = (RO, WW)


@pytest.fixture
async def sandbox() -> BubblewrapExecutor:
    """A probed executor. Skips where bubblewrap or namespaces are missing; *fails* where
    bubblewrap runs but the probe finds the confinement does not hold (a regression)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        if "does not confine" in str(exc):
            pytest.fail(str(exc))
        pytest.skip(f"bubblewrap cannot sandbox on this machine: {exc}")


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def outside() -> Iterator[pathlib.Path]:
    """A writable host directory outside the workspace and outside /tmp (which is hidden)."""
    base = pathlib.Path("/var/tmp")
    if not base.is_dir() or not os.access(base, os.W_OK):
        pytest.skip("needs a writable /var/tmp for a directory outside /tmp")
    with tempfile.TemporaryDirectory(dir=base) as name:
        os.chmod(name, 0o777)  # writable for the sandbox's uid too: only confinement stops it
        yield pathlib.Path(name)


@attrs.define
class Bash:
    """The bash tool behind a tool runtime, in one mode, as an agent would call it."""

    executor: BubblewrapExecutor
    workspace: pathlib.Path
    mode: SandboxMode
    limits: CommandLimits = attrs.field(factory=lambda: CommandLimits(time_limit=20.0))

    async def __call__(self, command: str) -> ToolResult:
        tool = BashTool(
            executor=self.executor,
            workspace=self.workspace,
            default_mode=self.mode,
            limits=self.limits,
        )
        runtime = ToolRuntime(tools=[tool])
        return await runtime.execute(
            ToolCall(id="attack", name="bash", arguments={"command": command})
        )
