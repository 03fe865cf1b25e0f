"""The executors: ``BubblewrapExecutor`` (bwrap for the confined modes, its probe at
start-up) and ``PlainExecutor`` (``danger-full-access`` only).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import attrs

from .._cgroup import Bounds, CommandCgroup
from .._environment import EnvironmentPolicy
from ._argv import _bwrap_argv
from ._command import (
    _DEFAULT_LIMITS,
    CommandLimits,
    CommandResult,
    _check_command,
    _check_limits,
    _check_mode,
    _check_workspace,
)
from ._modes import SandboxMode, SandboxUnavailableError, looks_like_write_denial
from ._probe import _PROBE_LIMITS, _PROBE_SCRIPT, _PROBE_SENTINEL
from ._process import _execute, _Outcome
from ._protected import DEFAULT_PROTECTED_PATHS, _absent, _check_protected, _remove_created
from ._seccomp import _seccomp_memfd


def _bwrap_missing(bwrap: str) -> SandboxUnavailableError:
    return SandboxUnavailableError(
        f"bubblewrap is not available: no executable {bwrap!r} found: install it "
        "(apt-get install bubblewrap) or choose danger-full-access mode"
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
