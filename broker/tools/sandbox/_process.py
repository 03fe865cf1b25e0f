"""The process tree of one command: spawned, its output drained within bounds, and killed
and reaped as a unit on every exit (time limit, cancellation, success).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from typing import TYPE_CHECKING

import attrs
import trio

if TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping, Sequence

    from .._cgroup import CommandCgroup
    from ._command import CommandLimits


# Bounds on clean-up work that runs shielded from cancellation, so clean-up itself can
# never hang the caller: after SIGKILL a process exits promptly unless it is stuck in the
# kernel, and pipes close once every holder is dead.
_KILL_GRACE = 5.0
_DRAIN_GRACE = 2.0
_POLL_INTERVAL = 0.002
_READ_CHUNK = 64 * 1024
# bwrap's --info-fd JSON is ~150 bytes; anything past this is not bwrap talking.
_INFO_LIMIT = 4096


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
