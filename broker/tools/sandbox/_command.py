"""One command's inputs and output: its limits, the checks of ``run``'s arguments, and the
result it comes back as.
"""

from __future__ import annotations

import os
import pathlib
from typing import TYPE_CHECKING

import attrs

from ._modes import SandboxMode

if TYPE_CHECKING:
    from collections.abc import Callable


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
