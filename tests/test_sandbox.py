"""The sandboxed executor against real bubblewrap and the real filesystem."""

from __future__ import annotations

import os
import pathlib
import secrets
import tempfile
import time
from typing import TYPE_CHECKING

import pytest
import trio

from broker.tools.sandbox import (
    ESCALATION_HINT,
    BubblewrapExecutor,
    CommandLimits,
    PlainExecutor,
    SandboxMode,
    SandboxUnavailableError,
    denial_marker,
    looks_like_write_denial,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

# Every test is bounded so a hang fails instead of stalling the suite.
BOUND = 20.0

RO = SandboxMode.READ_ONLY
WW = SandboxMode.WORKSPACE_WRITE
DFA = SandboxMode.DANGER_FULL_ACCESS


@pytest.fixture
async def sandbox() -> BubblewrapExecutor:
    try:
        return await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        pytest.skip(f"bubblewrap cannot sandbox on this machine: {exc}")


@pytest.fixture
def outside() -> Iterator[pathlib.Path]:
    """A writable host directory outside the workspace and outside /tmp.

    Not under /tmp because the sandbox mounts a private tmpfs there, which would hide it
    rather than refuse the write.
    """
    base = pathlib.Path("/var/tmp")
    if not base.is_dir():
        pytest.skip("needs /var/tmp for a directory outside /tmp")
    with tempfile.TemporaryDirectory(dir=base) as name:
        yield pathlib.Path(name)


def unique_sleep() -> str:
    """A sleep duration nobody else uses, so /proc can tell our processes apart."""
    return f"29.{secrets.randbelow(10**9):09d}"


def live_processes_mentioning(token: str) -> list[int]:
    """Pids of non-zombie host processes whose command line contains ``token``."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # exited while we looked
        if token.encode() in cmdline and state != b"Z":
            found.append(int(entry.name))
    return found


async def wait_until_running(token: str) -> None:
    # Polling is the only option: the condition is kernel state, no task can signal it.
    while not live_processes_mentioning(token):  # noqa: ASYNC110
        await trio.sleep(0.01)


# --- texts and vocabulary ---------------------------------------------------------------


def test_denial_marker_texts_are_pinned() -> None:
    assert denial_marker(RO) == "[sandbox: file access denied under read-only mode]"
    assert denial_marker(WW) == "[sandbox: file access denied under workspace-write mode]"
    assert denial_marker(DFA) == "[sandbox: file access denied under danger-full-access mode]"


def test_escalation_hint_text_is_pinned() -> None:
    assert ESCALATION_HINT == (
        "[sandbox: escalation available — retry this exact command once with "
        "sandbox_permissions (the narrowest wider mode that suffices) + justification; "
        "the approval prompt asks the user]"
    )


def test_modes_are_ordered_by_width() -> None:
    assert [m.value for m in SandboxMode] == [
        "read-only",
        "workspace-write",
        "danger-full-access",
    ]
    assert [m.rank for m in SandboxMode] == [0, 1, 2]
    assert WW.is_wider_than(RO)
    assert DFA.is_wider_than(WW)
    assert not RO.is_wider_than(RO)
    assert not RO.is_wider_than(DFA)


@pytest.mark.parametrize(
    "stderr",
    [
        "bash: line 1: out.txt: Read-only file system\n",
        "touch: cannot touch '/etc/x': Read-only file system\n",
        "OSError: [Errno 30] Read-only file system: 'x'\n",
        "bash: /etc/passwd: Permission denied\n",
        "bash: out.txt: Permission denied\n",
        "touch: cannot touch 'x': Permission denied\n",
        "PermissionError: [Errno 13] Permission denied: 'x'\n",
        "noise\nmkdir: cannot create directory '/a': Read-only file system\nmore noise\n",
    ],
)
def test_write_denial_heuristic_accepts(stderr: str) -> None:
    assert looks_like_write_denial(stderr)


@pytest.mark.parametrize(
    "stderr",
    [
        "",
        "cat: missing.txt: No such file or directory\n",
        "git@github.com: Permission denied (publickey).\n",
        "ssh: Permission denied\n",
        "make: *** [all] Error 1\n",
    ],
)
def test_write_denial_heuristic_rejects(stderr: str) -> None:
    assert not looks_like_write_denial(stderr)


# --- input validation -------------------------------------------------------------------


async def test_workspace_must_exist(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope"
    for executor in (BubblewrapExecutor(), PlainExecutor()):
        with pytest.raises(
            ValueError,
            match=rf"^workspace must be an existing directory, got '{missing}': create it first$",
        ):
            await executor.run("true", mode=DFA, workspace=missing)


@pytest.mark.parametrize("command", ["", "   "])
async def test_command_must_be_non_empty(tmp_path: pathlib.Path, command: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"^command must be a non-empty string, got '{command}': "
        r"pass the shell command to run$",
    ):
        await BubblewrapExecutor().run(command, mode=RO, workspace=tmp_path)


async def test_mode_must_be_known(tmp_path: pathlib.Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"^mode must be one of read-only, workspace-write, danger-full-access, "
        r"got 'rw': pick one of them$",
    ):
        await BubblewrapExecutor().run("true", mode="rw", workspace=tmp_path)  # type: ignore[arg-type]


async def test_plain_executor_only_runs_unconfined(tmp_path: pathlib.Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"^mode must be danger-full-access for PlainExecutor, got 'read-only': "
        r"use BubblewrapExecutor for confined modes$",
    ):
        await PlainExecutor().run("true", mode=RO, workspace=tmp_path)


async def test_root_is_not_a_confined_workspace() -> None:
    with pytest.raises(
        ValueError,
        match=r"^workspace must not be '/' in workspace-write mode: pick a project directory, "
        r"or choose danger-full-access mode$",
    ):
        await BubblewrapExecutor().run("true", mode=WW, workspace=pathlib.Path("/"))


def test_limits_must_be_positive() -> None:
    with pytest.raises(
        ValueError,
        match=r"^time_limit must be a positive number of seconds, got 0: "
        r"pass e\.g\. time_limit=30\.0$",
    ):
        CommandLimits(time_limit=0)
    with pytest.raises(ValueError, match=r"^time_limit must be a positive number of seconds"):
        CommandLimits(time_limit=float("nan"))
    with pytest.raises(
        ValueError,
        match=r"^output_limit must be a positive number of bytes, got -1: "
        r"pass e\.g\. output_limit=65536$",
    ):
        CommandLimits(output_limit=-1)


async def test_probe_names_a_missing_bwrap() -> None:
    with pytest.raises(
        SandboxUnavailableError,
        match=r"^bubblewrap is not available: no executable '/nonexistent/bwrap' found: "
        r"install it \(apt-get install bubblewrap\) or choose danger-full-access mode$",
    ):
        await BubblewrapExecutor.probe("/nonexistent/bwrap")


async def test_run_with_a_missing_bwrap_says_so(tmp_path: pathlib.Path) -> None:
    executor = BubblewrapExecutor(bwrap="/nonexistent/bwrap")
    with trio.fail_after(BOUND), pytest.raises(SandboxUnavailableError, match="/nonexistent/bwrap"):
        await executor.run("true", mode=RO, workspace=tmp_path)


# --- confinement ------------------------------------------------------------------------


async def test_read_only_refuses_a_workspace_write(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    with trio.fail_after(BOUND):
        result = await sandbox.run("echo hi > out.txt", mode=RO, workspace=tmp_path)
    assert result.mode is RO
    assert result.exit_code not in (0, None)
    assert "Read-only file system" in result.stderr
    assert result.write_denied
    assert not (tmp_path / "out.txt").exists()


async def test_read_only_can_read(sandbox: BubblewrapExecutor, tmp_path: pathlib.Path) -> None:
    (tmp_path / "in.txt").write_text("hello from the host\n")
    with trio.fail_after(BOUND):
        result = await sandbox.run("cat in.txt && pwd", mode=RO, workspace=tmp_path)
    assert result.exit_code == 0
    assert result.stdout == f"hello from the host\n{tmp_path}\n"
    assert not result.write_denied


async def test_workspace_write_writes_inside(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    with trio.fail_after(BOUND):
        result = await sandbox.run(
            "mkdir -p sub && echo hi > sub/out.txt", mode=WW, workspace=tmp_path
        )
    assert result.exit_code == 0
    assert not result.write_denied
    assert (tmp_path / "sub" / "out.txt").read_text() == "hi\n"


async def test_workspace_write_refuses_outside(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, outside: pathlib.Path
) -> None:
    target = outside / "escaped.txt"
    with trio.fail_after(BOUND):
        result = await sandbox.run(f"echo hi > {target}", mode=WW, workspace=tmp_path)
    assert result.exit_code not in (0, None)
    assert result.write_denied
    assert not target.exists()


async def test_tmp_is_private(sandbox: BubblewrapExecutor, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "ws"
    sibling = tmp_path / "sibling"
    workspace.mkdir()
    sibling.mkdir()
    name = f"sandbox-test-{secrets.token_hex(8)}"
    with trio.fail_after(BOUND):
        # /tmp itself is a writable tmpfs of the sandbox's own ...
        private = await sandbox.run(
            f"echo hi > /tmp/{name} && cat /tmp/{name}", mode=WW, workspace=workspace
        )
        # ... so the host's /tmp, apart from the workspace, is not even visible.
        hidden = await sandbox.run(f"echo hi > {sibling}/out.txt", mode=WW, workspace=workspace)
    assert (private.exit_code, private.stdout) == (0, "hi\n")
    assert not (pathlib.Path("/tmp") / name).exists()
    assert hidden.exit_code not in (0, None)
    assert "No such file or directory" in hidden.stderr
    assert not (sibling / "out.txt").exists()


async def test_danger_full_access_writes_anywhere(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, outside: pathlib.Path
) -> None:
    with trio.fail_after(BOUND):
        result = await sandbox.run(
            f"echo in > in.txt && echo out > {outside}/out.txt", mode=DFA, workspace=tmp_path
        )
    assert result.exit_code == 0
    assert (tmp_path / "in.txt").read_text() == "in\n"
    assert (outside / "out.txt").read_text() == "out\n"


async def test_read_only_after_workspace_write_is_confined_again(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    with trio.fail_after(BOUND):
        wide = await sandbox.run("echo one > one.txt", mode=WW, workspace=tmp_path)
        narrow = await sandbox.run("echo two > two.txt", mode=RO, workspace=tmp_path)
        overwrite = await sandbox.run("echo three > one.txt", mode=RO, workspace=tmp_path)
    assert wide.exit_code == 0
    assert narrow.write_denied
    assert overwrite.write_denied
    assert not (tmp_path / "two.txt").exists()
    assert (tmp_path / "one.txt").read_text() == "one\n"


async def test_write_denied_only_for_confined_failures(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path
) -> None:
    fake = "echo 'x: Read-only file system' >&2"
    with trio.fail_after(BOUND):
        unconfined = await sandbox.run(f"{fake}; exit 1", mode=DFA, workspace=tmp_path)
        succeeded = await sandbox.run(f"{fake}; exit 0", mode=RO, workspace=tmp_path)
        failed = await sandbox.run(f"{fake}; exit 1", mode=RO, workspace=tmp_path)
    assert not unconfined.write_denied
    assert not succeeded.write_denied
    # The heuristic reads text: a confined failure that prints the words counts.
    assert failed.write_denied


@pytest.mark.parametrize("mode", [RO, WW])
async def test_confined_modes_have_no_network(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, mode: SandboxMode
) -> None:
    connect = "exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    with trio.fail_after(BOUND):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        try:
            # The host listener is reachable without the sandbox (the control) ...
            control = await sandbox.run(connect.format(port=port), mode=DFA, workspace=tmp_path)
            # ... and unreachable inside it: the sandbox has its own, empty, network.
            confined = await sandbox.run(connect.format(port=port), mode=mode, workspace=tmp_path)
            interfaces = await sandbox.run(
                "tail -n +3 /proc/net/dev | cut -d: -f1", mode=mode, workspace=tmp_path
            )
        finally:
            for listener in listeners:
                await listener.aclose()
    assert (control.exit_code, control.stdout) == (0, "connected\n")
    assert confined.exit_code != 0
    assert confined.stdout == ""
    assert [line.strip() for line in interfaces.stdout.splitlines()] == ["lo"]


# --- process behaviour ------------------------------------------------------------------


@pytest.mark.parametrize("mode", list(SandboxMode))
async def test_exit_code_stdin_and_decoding(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, mode: SandboxMode
) -> None:
    with trio.fail_after(BOUND):
        result = await sandbox.run(
            "cat; printf 'a\\xffb'; echo oops >&2; exit 3", mode=mode, workspace=tmp_path
        )
    # stdin is /dev/null, so cat returns at once instead of waiting for input.
    assert result.exit_code == 3
    assert result.stdout == "a\ufffdb"
    assert result.stderr == "oops\n"
    assert not result.timed_out
    assert not result.output_truncated


@pytest.mark.parametrize("mode", [WW, DFA])
async def test_time_limit_kills_the_tree(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, mode: SandboxMode
) -> None:
    child, grandchild = unique_sleep(), unique_sleep()
    started = time.monotonic()
    with trio.fail_after(BOUND):
        result = await sandbox.run(
            f"touch started; sleep {child} & sleep {grandchild}; wait",
            mode=mode,
            workspace=tmp_path,
            limits=CommandLimits(time_limit=0.5),
        )
    assert time.monotonic() - started < 2.0
    assert (tmp_path / "started").exists()
    assert result.timed_out
    assert result.exit_code is None
    assert live_processes_mentioning(child) == []
    assert live_processes_mentioning(grandchild) == []


@pytest.mark.parametrize("mode", list(SandboxMode))
async def test_tiny_time_limit_leaves_nothing(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, mode: SandboxMode
) -> None:
    # The limit expires while bwrap is still building the sandbox: the kill must still
    # reach whatever it had started.
    for time_limit in (1e-6, 0.001, 0.002, 0.003, 0.005, 0.008, 0.012, 0.02):
        child, grandchild = unique_sleep(), unique_sleep()
        with trio.fail_after(BOUND):
            result = await sandbox.run(
                f"sleep {child} & sleep {grandchild}",
                mode=mode,
                workspace=tmp_path,
                limits=CommandLimits(time_limit=time_limit),
            )
        assert result.timed_out
        assert live_processes_mentioning(child) == []
        assert live_processes_mentioning(grandchild) == []


async def test_time_limit_kills_a_plain_command_by_pid(tmp_path: pathlib.Path) -> None:
    with trio.fail_after(BOUND):
        result = await PlainExecutor().run(
            "echo $$ > pid; sleep 30; true",
            mode=DFA,
            workspace=tmp_path,
            limits=CommandLimits(time_limit=0.5),
        )
    assert result.timed_out
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_plain_leftovers_die_with_the_command(tmp_path: pathlib.Path) -> None:
    token = unique_sleep()
    with trio.fail_after(BOUND):
        result = await PlainExecutor().run(
            f"sleep {token} >/dev/null 2>&1 &", mode=DFA, workspace=tmp_path
        )
    assert result.exit_code == 0
    assert not result.timed_out
    assert live_processes_mentioning(token) == []


async def test_plain_setsid_leftovers_die_with_the_commands_cgroup(tmp_path: pathlib.Path) -> None:
    executor = PlainExecutor()
    if executor.bounds.v2_parent is None and executor.bounds.pids_parent is None:
        pytest.skip(f"no command cgroup here: {executor.bounds.describe()}")
    token = unique_sleep()
    with trio.fail_after(BOUND):
        result = await executor.run(
            f"setsid sleep {token} >/dev/null 2>&1 < /dev/null &", mode=DFA, workspace=tmp_path
        )
    assert result.exit_code == 0
    assert live_processes_mentioning(token) == []


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_limit_keeps_a_prefix_and_drains(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, stream: str
) -> None:
    redirect = "" if stream == "stdout" else " >&2"
    with trio.fail_after(BOUND):
        result = await sandbox.run(
            f"yes | head -c 1000000{redirect}; echo done",
            mode=RO,
            workspace=tmp_path,
            limits=CommandLimits(output_limit=1000),
        )
    kept = result.stdout if stream == "stdout" else result.stderr
    assert result.exit_code == 0
    assert not result.timed_out
    assert result.output_truncated
    assert len(kept.encode()) == 1000
    assert kept == "y\n" * 500


@pytest.mark.parametrize("mode", list(SandboxMode))
async def test_caller_cancellation_kills_the_tree(
    sandbox: BubblewrapExecutor, tmp_path: pathlib.Path, mode: SandboxMode
) -> None:
    child, grandchild = unique_sleep(), unique_sleep()
    with trio.fail_after(BOUND):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: sandbox.run(
                    f"sleep {child} & sleep {grandchild}; wait", mode=mode, workspace=tmp_path
                )
            )
            await wait_until_running(grandchild)
            await wait_until_running(child)
            nursery.cancel_scope.cancel()
    # The nursery is closed, so run() has returned: nothing may be left behind.
    assert live_processes_mentioning(child) == []
    assert live_processes_mentioning(grandchild) == []


async def test_probe_returns_a_working_executor(sandbox: BubblewrapExecutor) -> None:
    assert pathlib.Path(sandbox.bwrap).is_absolute()
