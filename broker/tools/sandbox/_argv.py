"""The bwrap command line for a confined mode: namespaces, binds, the sandbox's uid, the
read-only ``/proc`` entries and the hidden socket directories (design/sandbox.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ._modes import SandboxMode

if TYPE_CHECKING:
    import pathlib
    from collections.abc import Sequence

    from ._command import CommandLimits


# The sandbox's user: "nobody" inside a user namespace of its own, with no capabilities.
_SANDBOX_ID = "65534"
# /proc entries that change the host, not just the sandbox (Docker's read-only list).
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
# Host directories that hold Unix sockets (Docker, D-Bus, databases...): hidden behind an
# empty read-only tmpfs. /tmp (X11 and friends) gets its own private tmpfs anyway.
_SOCKET_DIRS = ("/run", "/var/run", "/var/lib/docker", "/var/lib/containerd")


def _bwrap_argv(
    bwrap: str,
    mode: SandboxMode,
    workspace: pathlib.Path,
    *,
    info_fd: int,
    seccomp_fd: int,
    limits: CommandLimits,
    protected: Sequence[str] = (),
) -> list[str]:
    """The bwrap command line for a confined mode; see design/sandbox.md."""
    ws = str(workspace)
    size = str(limits.tmpfs_size)
    argv = [
        bwrap,
        # No privilege inside: an unprivileged uid in a user namespace of its own, every
        # capability dropped (bwrap started by root keeps them otherwise), no nested user
        # namespaces (they would hand capabilities back inside), fresh IPC, UTS, PID,
        # network and cgroup namespaces.
        "--unshare-user", "--uid", _SANDBOX_ID, "--gid", _SANDBOX_ID,
        "--disable-userns",
        "--cap-drop", "ALL",
        "--unshare-ipc",
        "--unshare-uts", "--hostname", "sandbox",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--ro-bind", "/", "/",
        # A fresh /dev, read-only except its own sized /dev/shm (device nodes stay usable:
        # a read-only mount does not stop writes to /dev/null).
        "--dev", "/dev",
        "--size", size, "--tmpfs", "/dev/shm",
        "--remount-ro", "/dev",
        "--proc", "/proc",
    ]  # fmt: skip
    for entry in _PROC_READ_ONLY:
        # The sandbox uid maps back to host uid 0 when root starts bwrap, so writable sysctls
        # (core_pattern...) would change the host: bind them read-only.
        argv += ["--ro-bind-try", f"/proc/{entry}", f"/proc/{entry}"]
    for directory in _SOCKET_DIRS:
        if os.path.isdir(directory) and not os.path.islink(directory):
            argv += ["--tmpfs", directory, "--remount-ro", directory]
    # The workspace bind comes after the /tmp tmpfs so a workspace under /tmp stays
    # visible; in read-only mode it is re-bound read-only for the same reason.
    ws_bind = "--bind" if mode is SandboxMode.WORKSPACE_WRITE else "--ro-bind"
    argv += ["--size", size, "--tmpfs", "/tmp", ws_bind, ws, ws]
    if mode is SandboxMode.WORKSPACE_WRITE:
        for name in protected:
            path = os.path.join(ws, name)
            if os.path.lexists(path):
                argv += ["--ro-bind", path, path]
    argv += [
        "--die-with-parent",
        "--new-session",
        "--seccomp", str(seccomp_fd),
        "--info-fd", str(info_fd),
        "--chdir", ws,
        "--",
    ]  # fmt: skip
    return argv
