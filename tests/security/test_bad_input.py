"""A machine that cannot confine: confinement is reported unavailable, escalation fails closed."""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import trio

from broker.tools import (
    BashTool,
    BubblewrapExecutor,
    PlainExecutor,
    SandboxUnavailableError,
    ToolCall,
    ToolRuntime,
)
from broker.tools._texts import ESCALATION_NO_SANDBOX

from .conftest import BOUND

pytestmark = pytest.mark.slow


def fake_bwrap(directory: pathlib.Path, body: str) -> str:
    path = directory / "bwrap"
    path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


async def test_missing_bubblewrap_is_reported_with_the_fix() -> None:
    with trio.fail_after(BOUND), pytest.raises(SandboxUnavailableError) as info:
        await BubblewrapExecutor.probe("/nonexistent/bwrap")
    assert str(info.value) == (
        "bubblewrap is not available: no executable '/nonexistent/bwrap' found: install it "
        "(apt-get install bubblewrap) or choose danger-full-access mode"
    )


async def test_refused_user_namespaces_are_reported(tmp_path: pathlib.Path) -> None:
    bwrap = fake_bwrap(
        tmp_path, "echo 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    with trio.fail_after(BOUND), pytest.raises(SandboxUnavailableError) as info:
        await BubblewrapExecutor.probe(bwrap)
    assert "cannot create namespaces (user namespaces are disabled or restricted)" in str(
        info.value
    )
    assert "setting up uid map: Permission denied" in str(info.value)


async def test_an_old_bubblewrap_without_the_options_is_refused(tmp_path: pathlib.Path) -> None:
    bwrap = fake_bwrap(tmp_path, "echo 'bwrap: Unknown option --disable-userns' >&2\nexit 1\n")
    with trio.fail_after(BOUND), pytest.raises(SandboxUnavailableError, match=r"bubblewrap 0\.8"):
        await BubblewrapExecutor.probe(bwrap)


async def test_a_sandbox_that_only_looks_confined_is_refused(tmp_path: pathlib.Path) -> None:
    # A "bwrap" that accepts every option and runs the command unconfined: exit 0, output
    # as expected, no confinement at all. The probe must see through it.
    bwrap = fake_bwrap(
        tmp_path,
        """
        while [ "$1" != -- ]; do shift; done
        shift
        exec "$@"
        """,
    )
    with trio.fail_after(BOUND), pytest.raises(SandboxUnavailableError) as info:
        await BubblewrapExecutor.probe(bwrap)
    message = str(info.value)
    assert message.startswith(
        f"bubblewrap at {bwrap!r} does not confine commands on this machine: "
    )
    assert "refusing to offer a sandbox that only looks confined" in message
    assert "/run is visible" in message or "the command runs as uid 0" in message


async def test_without_a_sandbox_escalation_fails_closed(tmp_path: pathlib.Path) -> None:
    tool = BashTool(executor=PlainExecutor(), workspace=tmp_path)
    runtime = ToolRuntime(tools=[tool])
    call = ToolCall(
        id="e",
        name="bash",
        arguments={
            "command": "touch escalated",
            "sandbox_permissions": "danger-full-access",
            "justification": "it needs to write",
        },
    )
    with trio.fail_after(BOUND):
        result = await runtime.execute(call)
    assert result.output == f"Error: {ESCALATION_NO_SANDBOX}"
    assert not (tmp_path / "escalated").exists()
