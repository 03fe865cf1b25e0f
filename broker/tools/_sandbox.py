"""Sandboxed command execution on trio: bubblewrap confinement in three modes.

The ``bash`` tool and the escalation gate are built on top of this module; it provides
the executors, the mode vocabulary and the two texts the model sees when a write is
refused. See ``design/sandbox.md`` for the bwrap argument lists and the kill strategy.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
from typing import TYPE_CHECKING

import attrs
import trio

from .._errors import BrokerError
from ._cgroup import Bounds, CommandCgroup
from ._environment import EnvironmentPolicy
from ._seccomp import setuid_filter

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "ESCALATION_HINT",
    "BubblewrapExecutor",
    "CommandLimits",
    "CommandResult",
    "PlainExecutor",
    "SandboxMode",
    "SandboxUnavailableError",
    "denial_marker",
    "looks_like_write_denial",
]


class SandboxMode(enum.StrEnum):
    """How much of the host a command may change, narrowest first."""

    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    DANGER_FULL_ACCESS = "danger-full-access"

    @property
    def rank(self) -> int:
        """Width of the mode: 0 for read-only up to 2 for danger-full-access."""
        # Declaration order is the width order; keeping it in one place avoids a second table.
        return list(SandboxMode).index(self)

    def is_wider_than(self, other: SandboxMode) -> bool:
        """Whether this mode allows strictly more than ``other``."""
        return self.rank > SandboxMode(other).rank


def denial_marker(mode: SandboxMode) -> str:
    """The marker a tool result carries when the sandbox refused a write under ``mode``."""
    return f"[sandbox: file access denied under {SandboxMode(mode)} mode]"


ESCALATION_HINT = (
    "[sandbox: escalation available — retry this exact command once with "
    "sandbox_permissions (the narrowest wider mode that suffices) + justification; "
    "the approval prompt asks the user]"
)


class SandboxUnavailableError(BrokerError, RuntimeError):
    """bubblewrap cannot confine commands on this machine; the message says why and the fix."""


def _check_time_limit(_inst: object, _attr: object, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(
            f"time_limit must be a positive number of seconds, got {value!r}: "
            "pass e.g. time_limit=30.0"
        )


def _check_output_limit(_inst: object, _attr: object, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"output_limit must be a positive number of bytes, got {value!r}: "
            "pass e.g. output_limit=65536"
        )


def _positive_int(name: str, example: str) -> Callable[[object, object, int], None]:
    def check(_inst: object, _attr: object, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"{name} must be a positive integer, got {value!r}: pass e.g. {example}"
            )

    return check


@attrs.frozen(kw_only=True)
class CommandLimits:
    """Bounds for one command: wall-clock seconds, bytes kept per output stream, processes,
    memory, and the size of each of the sandbox's RAM-backed ``/tmp`` and ``/dev/shm``.

    Output beyond ``output_limit`` is read and dropped (so the child never blocks on a
    full pipe) and the result says ``output_truncated``. ``max_processes`` and
    ``memory_limit`` are enforced by a per-command cgroup where one can be made, else by
    rlimits; :meth:`BubblewrapExecutor.describe_bounds` says which (design/sandbox.md).
    """

    time_limit: float = attrs.field(default=30.0, validator=_check_time_limit)
    output_limit: int = attrs.field(default=64 * 1024, validator=_check_output_limit)
    max_processes: int = attrs.field(
        default=512, validator=_positive_int("max_processes", "max_processes=512")
    )
    memory_limit: int = attrs.field(
        default=2 * 1024**3, validator=_positive_int("memory_limit", "memory_limit=2**31 (bytes)")
    )
    tmpfs_size: int = attrs.field(
        default=256 * 1024**2, validator=_positive_int("tmpfs_size", "tmpfs_size=2**28 (bytes)")
    )


@attrs.frozen(kw_only=True)
class CommandResult:
    """What one command did. ``exit_code`` is None when it was killed for the time limit."""

    mode: SandboxMode
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    output_truncated: bool
    write_denied: bool
    protected_removed: tuple[str, ...] = ()


_DEFAULT_LIMITS = CommandLimits()

# Bounds on clean-up work that runs shielded from cancellation, so clean-up itself can
# never hang the caller: after SIGKILL a process exits promptly unless it is stuck in the
# kernel, and pipes close once every holder is dead.
_KILL_GRACE = 5.0
_DRAIN_GRACE = 2.0
_POLL_INTERVAL = 0.002
_READ_CHUNK = 64 * 1024
# bwrap's --info-fd JSON is ~150 bytes; anything past this is not bwrap talking.
_INFO_LIMIT = 4096
_PROBE_LIMITS = CommandLimits(time_limit=10.0, output_limit=4096)

# One line of stderr that says a write hit the read-only bind (EROFS), or a permission
# refusal (EACCES) attributed to a path: "bash: /etc/x: Permission denied",
# "touch: cannot touch 'x': Permission denied", "PermissionError: [Errno 13] Permission
# denied: 'x'", "bash: out.txt: Permission denied". A bare "ssh: Permission denied
# (publickey)" has no path and does not count.
_EROFS_TEXT = "Read-only file system"
_EACCES_ON_PATH = re.compile(
    r"/.*Permission denied"
    r"|Permission denied.*/"
    r"|'[^']+'.*Permission denied"
    r"|Permission denied: '"
    r"|: [^:\s]+: Permission denied"
)


def looks_like_write_denial(stderr: str) -> bool:
    """Whether ``stderr`` reads like the sandbox refused a file write.

    The heuristic: some line mentions ``Read-only file system`` (EROFS, what the read-only
    binds produce), or ``Permission denied`` next to a path or quoted file name (EACCES).
    It only sees what the command printed: a program that swallows the error, or output
    cut by the output limit, goes undetected; an unrelated EACCES inside a confined
    command is reported as a denial. Callers apply it only to confined commands that
    failed.
    """
    return any(
        _EROFS_TEXT in line or _EACCES_ON_PATH.search(line) is not None
        for line in stderr.splitlines()
    )


def _check_command(command: object) -> str:
    if not isinstance(command, str) or not command.strip():
        raise ValueError(
            f"command must be a non-empty string, got {command!r}: pass the shell command to run"
        )
    if "\0" in command:
        raise ValueError(
            "command must not contain NUL bytes: remove them, bash cannot receive them"
        )
    return command


def _check_workspace(workspace: object) -> pathlib.Path:
    if not isinstance(workspace, str | os.PathLike):
        raise ValueError(
            f"workspace must be a path to an existing directory, got {workspace!r}: "
            "pass a pathlib.Path"
        )
    path = pathlib.Path(workspace)
    if not path.is_dir():
        raise ValueError(
            f"workspace must be an existing directory, got {str(path)!r}: create it first"
        )
    # bwrap binds and chdirs by absolute path; resolving symlinks makes the bind target the
    # directory the command actually sees.
    return path.resolve()


def _check_mode(mode: object) -> SandboxMode:
    # A plain str like "read-only" is accepted: the modes are a StrEnum.
    if isinstance(mode, str) and mode in set(SandboxMode):
        return SandboxMode(mode)
    choices = ", ".join(m.value for m in SandboxMode)
    raise ValueError(f"mode must be one of {choices}, got {mode!r}: pick one of them")


def _check_limits(limits: object) -> CommandLimits:
    if not isinstance(limits, CommandLimits):
        raise ValueError(f"limits must be a CommandLimits, got {limits!r}: pass CommandLimits(...)")
    return limits


def _bwrap_missing(bwrap: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"bubblewrap is not available: no executable {bwrap!r} found: install it "
        "(apt-get install bubblewrap) or choose danger-full-access mode"
    )


DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (".git", ".claude", ".codex", ".agents", ".broker")
"""Workspace entries kept read-only in ``workspace-write`` (Codex's ``.git`` and ``.codex`` are
the floor; ``.claude`` holds Claude Code settings and hooks; ``.broker`` this project's)."""

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


def _seccomp_memfd() -> int:
    """A memfd holding the setuid filter, positioned at its start, for bwrap's ``--seccomp``."""
    fd = os.memfd_create("broker-seccomp", 0)
    try:
        os.write(fd, setuid_filter())
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_protected(value: object) -> tuple[str, ...]:
    items = tuple(value) if isinstance(value, tuple | list) else None
    ok = items is not None and all(
        isinstance(v, str) and v and "/" not in v and v not in (".", "..") for v in items
    )
    if not ok or items is None:
        raise ValueError(
            f"protected_paths must be a tuple of workspace entry names, got {value!r}: "
            'pass e.g. (".git", ".claude")'
        )
    missing = [name for name in (".git", ".codex") if name not in items]
    if missing:
        raise ValueError(
            f"protected_paths must include {', '.join(missing)} (the floor), got {items!r}: "
            "add them to the tuple"
        )
    return tuple(str(v) for v in items)


def _absent(workspace: pathlib.Path, names: Sequence[str]) -> list[str]:
    return [name for name in names if not os.path.lexists(workspace / name)]


def _remove_created(workspace: pathlib.Path, names: Sequence[str]) -> tuple[str, ...]:
    """Remove protected entries the command created; the names that were removed."""
    removed = []
    for name in names:
        path = workspace / name
        if not os.path.lexists(path):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(name)
    return tuple(removed)


class _BoundedSink:
    """Keeps the first ``limit`` bytes of a stream and drains (drops) the rest."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept = bytearray()
        self.truncated = False

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(_READ_CHUNK):
            room = self._limit - len(self._kept)
            if room > 0:
                self._kept += chunk[:room]
            if len(chunk) > room:
                self.truncated = True

    def text(self) -> str:
        return self._kept.decode("utf-8", errors="replace")


def _parent_pid(pid: int) -> int | None:
    # /proc/<pid>/stat is "pid (comm) state ppid ..."; comm may contain spaces and
    # parentheses, so split after the last ')'.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def _group_has_live_members(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a member that is not a zombie."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False  # the common case: the group is empty, no /proc scan needed
    except PermissionError:
        pass
    # Zombies also answer signal 0, so look at each process's state and group.
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue  # gone while we looked
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


class _ProcessTree:
    """One spawned command and everything it started, killed and reaped as a unit.

    Plain commands run in their own session, so the process group holds the tree. bwrap
    commands run in a pid namespace whose init (learnt from ``--info-fd``) is a child of
    our bwrap process: killing that init makes the kernel kill every process in the
    namespace, and bwrap exits only after reaping it, which happens only once the whole
    namespace is gone. So "our child exited" means "the sandbox is empty".
    """

    def __init__(self, proc: trio.Process, cgroup: CommandCgroup | None = None) -> None:
        self.proc = proc
        self._cgroup = cgroup
        # Our own pidfd for the direct child lets us see it exit without reaping it, so
        # its pid (= the process group id) stays pinned while we kill the group.
        self._pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):
            self._pidfd = os.pidfd_open(proc.pid)
        self._init_pidfd: int | None = None
        self._finished = False

    async def learn_sandbox_init(self, info: trio.lowlevel.FdStream) -> None:  # noqa: ASYNC910
        """Read bwrap's --info-fd JSON and hold a pidfd on the sandbox's init process."""
        data = bytearray()
        while len(data) <= _INFO_LIMIT and (chunk := await info.receive_some(_INFO_LIMIT)):
            data += chunk
        try:
            child = json.loads(bytes(data))["child-pid"]
        except (ValueError, KeyError, TypeError):
            return  # bwrap failed before creating the sandbox; killpg covers it  # noqa: ASYNC910
        if not isinstance(child, int):
            return  # noqa: ASYNC910 (see above)
        try:
            fd = os.pidfd_open(child)
        except (OSError, AttributeError):
            return  # noqa: ASYNC910 (see above)
        # The pid could have been reused if init already exited and was reaped; keep the
        # pidfd only if it is our bwrap's child and still alive *after* the check.
        try:
            if _parent_pid(child) == self.proc.pid:
                signal.pidfd_send_signal(fd, 0)
                self._init_pidfd, fd = fd, -1
        except OSError:
            pass
        finally:
            if fd >= 0:
                os.close(fd)

    async def wait_exited(self) -> None:
        """Wait until the direct child has exited, without reaping it."""
        if self._pidfd is not None:
            await trio.lowlevel.wait_readable(self._pidfd)
        else:
            # No pidfd (old kernel): reaping is the only way to wait.
            await self.proc.wait()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _kill_sandbox_init(self) -> bool:
        if self._init_pidfd is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
        return True

    async def finish(self) -> None:
        """Kill whatever is left and reap the child. Idempotent; call it shielded."""
        if self._finished:
            return  # noqa: ASYNC910 (idempotent second call)
        try:
            with trio.move_on_after(_KILL_GRACE) as grace:  # noqa: ASYNC912 (shielded cleanup)
                if self.proc.returncode is None:
                    # Prefer killing the sandbox init: bwrap then reaps it and exits, so
                    # nothing is left for the host's init to reap.
                    if not self._kill_sandbox_init():
                        self._kill_group()
                    await self.wait_exited()
            if grace.cancelled_caught:
                self._kill_group()  # SIGKILL to our direct child: it will exit
                await self.wait_exited()
            # The leader is exited but not yet reaped, so the group id cannot have been
            # reused: this kills what a plain command left running in its group.
            self._kill_group()
            await self.proc.wait()
            # Those leftovers are not our children, so we cannot reap them; wait until
            # they are at least dead (zombies of whoever adopted them). Polling: no event
            # exists for "a non-child died".
            with trio.move_on_after(_KILL_GRACE):  # noqa: ASYNC912 (shielded cleanup)
                while _group_has_live_members(self.proc.pid):  # noqa: ASYNC110 (kernel state)
                    await trio.sleep(_POLL_INTERVAL)
            if self._cgroup is not None:
                # The cgroup also holds what left the session (setsid) and, as a backstop,
                # anything left of the sandbox; it can be removed once it is empty.
                with trio.move_on_after(_KILL_GRACE):  # noqa: ASYNC912 (shielded cleanup)
                    while not (self._cgroup.kill() and self._cgroup.remove()):  # noqa: ASYNC110 (kernel state)
                        await trio.sleep(_POLL_INTERVAL)
        finally:
            self._finished = True
            for fd in (self._pidfd, self._init_pidfd):
                if fd is not None:
                    os.close(fd)
            self._pidfd = self._init_pidfd = None


@attrs.frozen(kw_only=True)
class _Outcome:
    exit_code: int | None
    stdout: _BoundedSink
    stderr: _BoundedSink
    timed_out: bool


async def _execute(
    argv: Sequence[str],
    *,
    cwd: pathlib.Path,
    limits: CommandLimits,
    info_fds: tuple[int, int] | None,
    env: Mapping[str, str],
    extra_fds: tuple[int, ...] = (),
    cgroup: CommandCgroup | None = None,
) -> _Outcome:
    """Run ``argv`` to completion or the time limit; kill and reap the tree on any exit."""
    pass_fds = extra_fds if info_fds is None else (info_fds[1], *extra_fds)
    if cgroup is not None:
        argv = [*cgroup.join_argv(), *argv]
    try:
        proc = await trio.lowlevel.open_process(
            list(argv),
            cwd=str(cwd),
            # bwrap's own init keeps the environment bwrap started with (readable at
            # /proc/1/environ inside), so bwrap itself gets only the filtered one.
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Own session: the group id is the child's pid, so killpg reaches the tree
            # without touching us.
            start_new_session=True,
            pass_fds=pass_fds,
        )
    except BaseException:
        if info_fds is not None:
            os.close(info_fds[0])
        if cgroup is not None:
            cgroup.kill()
            cgroup.remove()
        raise
    finally:
        if info_fds is not None:
            # The child has its own copy; ours must close so the reader sees EOF.
            os.close(info_fds[1])
    info = None if info_fds is None else trio.lowlevel.FdStream(info_fds[0])
    assert proc.stdout is not None
    assert proc.stderr is not None
    tree = _ProcessTree(proc, cgroup)
    out = _BoundedSink(limits.output_limit)
    err = _BoundedSink(limits.output_limit)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(out.drain, proc.stdout)
            nursery.start_soon(err.drain, proc.stderr)
            deadline = trio.current_time() + limits.time_limit
            if info is not None:
                # Shielded (bwrap reports within milliseconds of starting): without the
                # init's pidfd a kill leaves the sandbox dying rather than dead on return.
                with trio.CancelScope(shield=True), trio.move_on_after(_KILL_GRACE):
                    await tree.learn_sandbox_init(info)
            with trio.move_on_at(deadline) as budget:
                await tree.wait_exited()
            with trio.CancelScope(shield=True):
                await tree.finish()
            # Everything that held the pipes is dead, so the readers reach EOF; the grace
            # only matters if a plain command's descendant left its session (setsid).
            nursery.cancel_scope.deadline = min(
                nursery.cancel_scope.deadline, trio.current_time() + _DRAIN_GRACE
            )
    finally:
        # Reached on success, time limit and caller cancellation alike: the tree is killed
        # and reaped before any cancellation propagates.
        with trio.CancelScope(shield=True):
            await tree.finish()
            await proc.stdout.aclose()
            await proc.stderr.aclose()
            if info is not None:
                await info.aclose()
    timed_out = budget.cancelled_caught
    return _Outcome(
        exit_code=None if timed_out else proc.returncode,
        stdout=out,
        stderr=err,
        timed_out=timed_out,
    )


def _result(
    mode: SandboxMode, outcome: _Outcome, protected_removed: tuple[str, ...] = ()
) -> CommandResult:
    stderr = outcome.stderr.text()
    confined = mode is not SandboxMode.DANGER_FULL_ACCESS
    return CommandResult(
        mode=mode,
        exit_code=outcome.exit_code,
        stdout=outcome.stdout.text(),
        stderr=stderr,
        timed_out=outcome.timed_out,
        output_truncated=outcome.stdout.truncated or outcome.stderr.truncated,
        write_denied=bool(protected_removed)
        or (confined and outcome.exit_code != 0 and looks_like_write_denial(stderr)),
        protected_removed=protected_removed,
    )


def _bounded_argv(bounds: Bounds, limits: CommandLimits) -> tuple[list[str], CommandCgroup | None]:
    """The cgroup for one command (or None) and the rlimit prefix for what it does not bound."""
    try:
        cgroup = bounds.create(max_processes=limits.max_processes, memory_limit=limits.memory_limit)
    except OSError as exc:
        # Fail closed: detect() found the cgroup usable, so a failure now is not a reason to
        # run the command unbounded.
        raise SandboxUnavailableError(
            f"cannot create the command's cgroup ({exc.strerror or exc}): check "
            f"{bounds.describe()}, or pass bounds=Bounds() to use rlimits only"
        ) from exc
    prefix = bounds.rlimit_argv(
        max_processes=limits.max_processes, memory_limit=limits.memory_limit
    )
    return prefix, cgroup


async def _run_plain(
    command: str,
    workspace: pathlib.Path,
    limits: CommandLimits,
    environment: EnvironmentPolicy,
    bounds: Bounds,
) -> CommandResult:
    prefix, cgroup = _bounded_argv(bounds, limits)
    outcome = await _execute(
        [*prefix, "bash", "-c", command],
        cwd=workspace,
        limits=limits,
        info_fds=None,
        env=environment.build(),
        cgroup=cgroup,
    )
    return _result(SandboxMode.DANGER_FULL_ACCESS, outcome)


# Run inside a real sandbox by probe(): every property the confinement rests on, checked by
# trying it, with bash and coreutils only (the host's python may not be reachable by the
# sandbox's uid). Prints one line per property that does not hold, then the sentinel, so an
# empty output (a "sandbox" that ran nothing) is not mistaken for success. Nothing here
# changes the host even where a check fails: ": >>" opens for writing and writes nothing.
_PROBE_SENTINEL = "broker-probe-done"
_PROBE_SCRIPT = r"""
[ "$(id -u)" != 0 ] || echo "the command runs as uid 0"
cap=$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status)
[ "$cap" = 0000000000000000 ] || echo "the command keeps capabilities (CapEff $cap)"
if command -v mount >/dev/null; then
    mount -o remount,bind,rw / 2>/dev/null && echo "a remount of / succeeds"
fi
( : >> /proc/sys/kernel/core_pattern ) 2>/dev/null && echo "/proc/sys is writable"
f=/dev/shm/setuid-probe
: > "$f" && chmod 6755 "$f" 2>/dev/null
{ [ -u "$f" ] || [ -g "$f" ]; } && echo "a setuid bit can be set"
for d in /run /var/run; do
    [ -z "$(ls -A "$d" 2>/dev/null)" ] || echo "$d is visible"
done
if command -v unshare >/dev/null; then
    unshare -U true 2>/dev/null && echo "a nested user namespace can be created"
fi
echo broker-probe-done
"""


@attrs.define(eq=False)
class BubblewrapExecutor:
    """Runs shell commands confined by bubblewrap (``read-only``, ``workspace-write``) or
    unconfined (``danger-full-access``).

    Build it with :meth:`probe` so a machine that cannot sandbox fails at start-up, not on
    the first command. ``environment`` filters what every command (and bwrap) inherits;
    ``protected_paths`` are workspace entries that stay read-only in ``workspace-write``;
    ``bounds`` says how ``max_processes`` and ``memory_limit`` are enforced.
    """

    bwrap: str = "bwrap"
    environment: EnvironmentPolicy = attrs.field(factory=EnvironmentPolicy)
    protected_paths: tuple[str, ...] = attrs.field(
        default=DEFAULT_PROTECTED_PATHS, converter=_check_protected
    )
    bounds: Bounds = attrs.field(factory=Bounds.detect)

    def describe_bounds(self) -> str:
        """Which mechanism enforces the process and memory limits on this machine."""
        return self.bounds.describe()

    @classmethod
    async def probe(
        cls,
        bwrap: str = "bwrap",
        *,
        environment: EnvironmentPolicy | None = None,
        protected_paths: tuple[str, ...] = DEFAULT_PROTECTED_PATHS,
    ) -> BubblewrapExecutor:
        """Check, inside a real read-only sandbox, that confinement holds.

        It must: run as a uid other than 0, with no effective capabilities, unable to
        remount ``/``, to write ``/proc/sys``, to set a setuid bit, to see ``/run``, or to
        create a nested user namespace. Returns an executor bound to the resolved bwrap
        path. Raises :class:`SandboxUnavailableError` naming the reason (binary missing,
        namespaces refused, a property that does not hold, probe hung) and the fix — never
        a sandbox that only looks confined.

        Cancellation: the probe command is killed and reaped, then the cancellation
        propagates; no executor is returned.
        """
        path = shutil.which(bwrap)
        if path is None:
            raise _bwrap_missing(bwrap)
        executor = cls(
            bwrap=path,
            environment=environment or EnvironmentPolicy(),
            protected_paths=protected_paths,
        )
        result = await executor.run(
            _PROBE_SCRIPT,
            mode=SandboxMode.READ_ONLY,
            workspace=pathlib.Path(tempfile.gettempdir()),
            limits=_PROBE_LIMITS,
        )
        if result.timed_out:
            raise SandboxUnavailableError(
                f"bubblewrap at {path!r} did not finish a trivial command within "
                f"{_PROBE_LIMITS.time_limit:g}s: check the host, or choose danger-full-access mode"
            )
        if result.exit_code != 0:
            reason = next(iter(result.stderr.strip().splitlines()), "no error output")
            lowered = result.stderr.lower()
            why = (
                "cannot create namespaces (user namespaces are disabled or restricted)"
                if "namespace" in lowered or "uid map" in lowered or "not permitted" in lowered
                else f"failed with exit code {result.exit_code}"
            )
            raise SandboxUnavailableError(
                f"bubblewrap at {path!r} {why}: {reason}: enable unprivileged user namespaces "
                "(sysctl kernel.unprivileged_userns_clone=1, or on ubuntu "
                "kernel.apparmor_restrict_unprivileged_userns=0), install bubblewrap 0.8 or "
                "newer, or choose danger-full-access mode"
            )
        lines = result.stdout.splitlines()
        failures = lines[:-1] if lines[-1:] == [_PROBE_SENTINEL] else lines or ["it ran nothing"]
        if failures or lines[-1:] != [_PROBE_SENTINEL]:
            raise SandboxUnavailableError(
                f"bubblewrap at {path!r} does not confine commands on this machine: "
                f"{'; '.join(failures)}: "
                "refusing to offer a sandbox that only looks confined; fix the host "
                "(bubblewrap 0.8 or newer, user namespaces, seccomp) or choose "
                "danger-full-access mode"
            )
        return executor

    async def run(
        self,
        command: str,
        *,
        mode: SandboxMode,
        workspace: pathlib.Path,
        limits: CommandLimits = _DEFAULT_LIMITS,
    ) -> CommandResult:
        """Run ``bash -c command`` with cwd ``workspace`` under ``mode``; stdin is /dev/null.

        ``read-only`` and ``workspace-write`` run inside bwrap with no network, no privilege
        and the protected paths read-only; ``danger-full-access`` runs bash directly. Every
        mode gets the filtered environment and the process and memory bounds. When the time
        limit passes the whole process tree is killed and the result has
        ``timed_out=True``, ``exit_code=None``. A protected entry that did not exist and
        that the command created is removed afterwards (``protected_removed``).

        Cancellation: the command and every process it started are killed (SIGKILL) and
        reaped before the cancellation propagates; no result is returned. A cancellation
        that arrives while bwrap is still starting waits for it to report its sandbox
        (milliseconds), so the kill can reach the whole sandbox.
        """
        command = _check_command(command)
        mode = _check_mode(mode)
        ws = _check_workspace(workspace)
        limits = _check_limits(limits)
        if mode is SandboxMode.DANGER_FULL_ACCESS:
            return await _run_plain(command, ws, limits, self.environment, self.bounds)
        if ws == pathlib.Path("/"):
            # Binding / over / would undo the fresh /dev, /proc and /tmp, and in
            # workspace-write it would make the whole host writable.
            raise ValueError(
                f"workspace must not be '/' in {mode.value} mode: pick a project directory, "
                "or choose danger-full-access mode"
            )
        if shutil.which(self.bwrap) is None:
            # Checked here because the cgroup wrapper, not us, would exec a missing binary.
            raise _bwrap_missing(self.bwrap)
        absent: list[str] = []
        if mode is SandboxMode.WORKSPACE_WRITE:
            absent = _absent(ws, self.protected_paths)
        seccomp_fd = _seccomp_memfd()
        try:
            prefix, cgroup = _bounded_argv(self.bounds, limits)
            info_r, info_w = os.pipe()
            argv = [
                *prefix,
                *_bwrap_argv(
                    self.bwrap,
                    mode,
                    ws,
                    info_fd=info_w,
                    seccomp_fd=seccomp_fd,
                    limits=limits,
                    protected=self.protected_paths,
                ),
                "bash",
                "-c",
                command,
            ]
            try:
                outcome = await _execute(
                    argv,
                    cwd=ws,
                    limits=limits,
                    info_fds=(info_r, info_w),
                    env=self.environment.build(),
                    extra_fds=(seccomp_fd,),
                    cgroup=cgroup,
                )
            except FileNotFoundError as exc:
                if exc.filename != self.bwrap:
                    raise
                raise _bwrap_missing(self.bwrap) from exc
        finally:
            os.close(seccomp_fd)
        # Every process of the sandbox is dead here, so nothing can recreate what is removed.
        removed = _remove_created(ws, absent) if absent else ()
        return _result(mode, outcome, removed)


@attrs.define(eq=False)
class PlainExecutor:
    """Runs shell commands with no confinement; only ``danger-full-access`` is accepted.

    Commands still get the filtered ``environment`` and the process and memory ``bounds``.
    """

    environment: EnvironmentPolicy = attrs.field(factory=EnvironmentPolicy)
    bounds: Bounds = attrs.field(factory=Bounds.detect)

    async def run(
        self,
        command: str,
        *,
        mode: SandboxMode,
        workspace: pathlib.Path,
        limits: CommandLimits = _DEFAULT_LIMITS,
    ) -> CommandResult:
        """Run ``bash -c command`` with cwd ``workspace``; stdin is /dev/null.

        The command runs in its own session (and its own cgroup where one can be made); on
        the time limit that process group is killed (a descendant that started its own
        session escapes it unless a cgroup holds it).

        Cancellation: the command's process group is killed (SIGKILL) and the command
        reaped before the cancellation propagates; no result is returned.
        """
        command = _check_command(command)
        mode = _check_mode(mode)
        if mode is not SandboxMode.DANGER_FULL_ACCESS:
            raise ValueError(
                f"mode must be danger-full-access for PlainExecutor, got {mode.value!r}: "
                "use BubblewrapExecutor for confined modes"
            )
        ws = _check_workspace(workspace)
        limits = _check_limits(limits)
        return await _run_plain(command, ws, limits, self.environment, self.bounds)
