"""Run one ``PreToolUse`` command hook as a real subprocess and read its verdict, failing closed.

The hook runs as ``bash -c <command>`` in its own session (so its whole process group can be
killed), with the event JSON on stdin. Claude Code's output contract is honoured: exit 0 with
empty stdout is no opinion, exit 0 with a JSON object carries
``hookSpecificOutput.permissionDecision``, exit 2 denies with stderr as the reason. Unlike Claude
Code, *every other outcome denies*: a timeout, a signal, another exit status, malformed output.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
from typing import TYPE_CHECKING, Literal

import attrs
import trio

from .._display import printable
from ..tools import Bounds

if TYPE_CHECKING:
    import pathlib
    from collections.abc import Mapping

    from ..tools import CommandCgroup
    from ._settings import CommandHook

__all__ = ["OUTPUT_CAP", "Decision", "HookVerdict", "run_hook"]

OUTPUT_CAP = 64 * 1024
"""Bytes kept of a hook's stdout and of its stderr; the rest is read and dropped."""

log = logging.getLogger("broker.hooks")

_SHOWN_COMMAND = 60
_REAP_GRACE = 5.0
_POLL_INTERVAL = 0.002
_SHOWN_STDERR_LINE = 200

Decision = Literal["allow", "deny", "ask"]
_DECISIONS: dict[str, Decision] = {"allow": "allow", "deny": "deny", "ask": "ask"}


@attrs.frozen(kw_only=True)
class HookVerdict:
    """What one hook said: ``decision`` ``None`` is no opinion; failures are ``"deny"``."""

    hook: CommandHook
    decision: Decision | None
    reason: str | None = None


class _Malformed(Exception):
    """The hook's stdout broke the output contract; the message says how."""


def _shown_command(command: str) -> str:
    """*command* on one line, cut to about 60 characters, control characters escaped."""
    flat = printable(" ".join(command.split()))
    return flat if len(flat) <= _SHOWN_COMMAND else flat[: _SHOWN_COMMAND - 1] + "…"


def _failed(hook: CommandHook, why: str) -> HookVerdict:
    return HookVerdict(
        hook=hook, decision="deny", reason=f'PreToolUse hook "{_shown_command(hook.command)}" {why}'
    )


@attrs.define(eq=False)
class _Capped:
    """Keeps the first ``OUTPUT_CAP`` bytes of a stream; counts whether any were dropped."""

    data: bytearray = attrs.field(factory=bytearray)
    overflowed: bool = False

    async def drain(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some(OUTPUT_CAP):
            room = OUTPUT_CAP - len(self.data)
            if len(chunk) > room:
                self.overflowed = True
            self.data += chunk[: max(room, 0)]

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


async def _feed(  # noqa: ASYNC910 (a child task; a broken pipe ends it at once)
    stream: trio.abc.SendStream, payload: bytes
) -> None:
    """Write the event JSON and close stdin; a hook that exits without reading it is fine."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(payload)
        await stream.aclose()


def _kill_group(pgid: int) -> None:
    """SIGKILL every process left in the hook's process group (none left is fine)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _wait_exited(process: trio.Process) -> None:
    """Wait until the hook's shell exits, *without reaping it* where the OS allows.

    While the shell is an unreaped zombie its pid (our process group id) cannot be recycled, so
    the ``killpg`` that follows can only reach the hook's own leftovers. Without pidfds (not
    Linux) this reaps; the ``killpg`` after it is then best effort.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        await process.wait()
        return
    try:
        await trio.lowlevel.wait_readable(pidfd)
    finally:
        trio.lowlevel.notify_closing(pidfd)
        os.close(pidfd)


@functools.cache
def _bounds() -> Bounds:
    """Where hook cgroups can be made on this machine (detected once, on first use)."""
    return Bounds.detect()


_pid_namespace: list[list[str]] = []  # [argv prefix] once detected; [] before

# The PID namespace's init: the hook's shell must not be pid 1 itself (init ignores signals
# sent from inside its namespace, so a hook's `kill -9 $$` would be a no-op). It keeps the
# hook's stdin (an asynchronous command would get /dev/null) and exits with the hook's
# status, 128+N for a signal.
_PIDNS_INIT = 'exec 3<&0; "$@" <&3 3<&- & wait $!'


async def _pid_namespace_prefix() -> list[str]:
    """``unshare`` into a new PID namespace (and user namespace when not root), or ``[]``.

    The fallback where no cgroup can be made: the hook's shell is then the namespace's init,
    and when it exits the kernel kills everything left in the namespace. Detected once.
    """
    await trio.lowlevel.checkpoint()
    if _pid_namespace:
        return _pid_namespace[0]
    prefix: list[str] = []
    unshare = shutil.which("unshare")
    if unshare is not None:
        user = [] if os.geteuid() == 0 else ["--user", "--map-current-user"]
        candidate = [
            *(unshare, *user, "--pid", "--fork", "--kill-child", "--"),
            *("/bin/sh", "-c", _PIDNS_INIT, "sh"),
        ]
        with trio.move_on_after(_REAP_GRACE):
            done = await trio.run_process(
                [*candidate, "true"],
                check=False,
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
            )
            if done.returncode == 0:
                prefix = candidate
    if not prefix:
        log.warning(
            "no writable cgroup and no usable PID namespace (unshare): PreToolUse hooks run "
            "in their own process group only, so a hook process that calls setsid can "
            "outlive its hook"
        )
    _pid_namespace.append(prefix)
    return prefix


async def _empty_cgroup(cgroup: CommandCgroup) -> None:
    """Kill everything in *cgroup* until it is empty, then remove it (bounded; shield it)."""
    await trio.lowlevel.checkpoint()
    with trio.move_on_after(_REAP_GRACE):  # noqa: ASYNC912 (shielded cleanup)
        while not (cgroup.kill() and cgroup.remove()):  # noqa: ASYNC110 (kernel state)
            await trio.sleep(_POLL_INTERVAL)


async def run_hook(
    hook: CommandHook, payload: Mapping[str, object], *, cwd: pathlib.Path
) -> HookVerdict:
    """Run *hook* with *payload* (JSON-encoded) on stdin in *cwd*; never raises for hook faults.

    The hook gets ``hook.timeout`` seconds; a timeout, a signal, a non-zero exit other than 2
    and malformed output all come back as ``"deny"`` with a reason naming the hook. When the
    shell exits, anything it left running in its process group is killed; stdout and stderr are
    capped at :data:`OUTPUT_CAP` bytes each.

    Cancellation: the hook's whole process group is SIGKILLed and reaped (shielded), then
    ``Cancelled`` propagates; no process outlives the call.
    """
    data = json.dumps(dict(payload)).encode()
    env = {**os.environ, "CLAUDE_PROJECT_DIR": str(cwd)}
    if (changed := hook.changed_pin()) is not None:
        await trio.lowlevel.checkpoint()
        return _failed(
            hook,
            f"was not run: {printable(changed)} changed since the settings were loaded "
            "(sha256 mismatch); reload the settings to trust the new content",
        )
    # Its own cgroup holds every process the hook starts, including one that leaves the
    # process group with setsid: killing the cgroup when the hook ends leaves nothing behind.
    try:
        cgroup = _bounds().contain()
    except OSError as exc:
        await trio.lowlevel.checkpoint()
        return _failed(hook, f"could not be contained: cannot create its cgroup: {exc}")
    argv = ["bash", "-c", hook.command]
    in_pid_namespace = False
    if cgroup is not None:
        argv = [*cgroup.join_argv(), *argv]
    else:
        prefix = await _pid_namespace_prefix()
        in_pid_namespace = bool(prefix)
        argv = [*prefix, *argv]
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        if cgroup is not None:
            cgroup.remove()
        why = (exc.strerror or type(exc).__name__).lower()
        if exc.filename is not None:
            why += f": {exc.filename}"
        await trio.lowlevel.checkpoint()
        return _failed(hook, f"could not be started: {why}")
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    out, err = _Capped(), _Capped()
    try:
        with trio.move_on_after(hook.timeout) as deadline:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_feed, process.stdin, data)
                nursery.start_soon(out.drain, process.stdout)
                nursery.start_soon(err.drain, process.stderr)
                await _wait_exited(process)
                _kill_group(process.pid)  # background leftovers; also ends their hold on stdout
                if cgroup is not None:
                    cgroup.kill()  # and those that left the group with setsid
    finally:
        _kill_group(process.pid)
        with trio.CancelScope(shield=True):
            status = await process.wait()
            if cgroup is not None:
                await _empty_cgroup(cgroup)
            for stream in (process.stdin, process.stdout, process.stderr):
                await stream.aclose()
    if deadline.cancelled_caught:
        return _failed(hook, f"timed out after {hook.timeout:g}s")
    if in_pid_namespace and 128 < status <= 128 + 64:
        status = 128 - status  # the init reports a signal as 128+N, as shells do
    return _interpret(hook, status, out, err)


def _interpret(hook: CommandHook, status: int, out: _Capped, err: _Capped) -> HookVerdict:
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return _failed(hook, f"was killed by signal {name}")
    if status == 2:
        return HookVerdict(hook=hook, decision="deny", reason=err.text().strip() or None)
    if status != 0:
        line = next((ln.strip() for ln in err.text().splitlines() if ln.strip()), "")
        if len(line) > _SHOWN_STDERR_LINE:
            line = line[: _SHOWN_STDERR_LINE - 1] + "…"
        return _failed(hook, f"exited with status {status}" + (f": {line}" if line else ""))
    try:
        decision, reason = _read_output(out)
    except _Malformed as exc:
        return _failed(hook, f"printed malformed output: {exc}")
    return HookVerdict(hook=hook, decision=decision, reason=reason)


def _read_output(out: _Capped) -> tuple[Decision | None, str | None]:
    """The decision and reason in a hook's stdout (exit status 0); raise :class:`_Malformed`."""
    if out.overflowed:
        raise _Malformed(f"stdout is longer than {OUTPUT_CAP} bytes")
    if not out.data.strip():
        return None, None
    try:
        obj: object = json.loads(out.data)
    except ValueError:
        raise _Malformed("stdout is not json") from None
    if not isinstance(obj, dict):
        raise _Malformed(f"stdout is json {type(obj).__name__}, not an object")
    if obj.get("continue", True) is False:
        # Claude Code stops the whole turn; the nearest gate decision is to refuse the call.
        return "deny", _optional_text(obj, "stopReason", "stopReason")
    specific = obj.get("hookSpecificOutput")
    if specific is not None:
        if not isinstance(specific, dict):
            raise _Malformed("hookSpecificOutput is not an object")
        event = specific.get("hookEventName", "PreToolUse")
        if event != "PreToolUse":
            raise _Malformed(f"hookSpecificOutput.hookEventName is {json.dumps(event)}")
        path = "hookSpecificOutput.permissionDecisionReason"
        reason = _optional_text(specific, "permissionDecisionReason", path)
        decision = specific.get("permissionDecision")
        if decision is not None:
            known = _DECISIONS.get(decision) if isinstance(decision, str) else None
            if known is None:
                raise _Malformed(
                    f"hookSpecificOutput.permissionDecision {_json(decision)} is not one of "
                    '"allow", "deny", "ask"'
                )
            return known, reason
    # Deprecated for PreToolUse but still documented: "approve" -> allow, "block" -> deny.
    legacy = obj.get("decision")
    if legacy is None:
        return None, None
    reason = _optional_text(obj, "reason", "reason")
    if legacy == "approve":
        return "allow", reason
    if legacy == "block":
        return "deny", reason
    raise _Malformed(f'decision {_json(legacy)} is not one of "approve", "block"')


def _optional_text(obj: Mapping[str, object], key: str, path: str) -> str | None:
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value or None
    raise _Malformed(f"{path} is not a string")


def _json(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"
