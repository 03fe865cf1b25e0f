"""Sandboxed command execution on trio: bubblewrap confinement in three modes.

The ``bash`` tool and the escalation gate are built on top of this package; it provides
the executors, the mode vocabulary and the two texts the model sees when a write is
refused. See ``design/sandbox.md`` for the bwrap argument lists and the kill strategy.

One concept per module: ``_modes`` (the modes, the refusal texts, the error for a host with
no sandbox), ``_command`` (a command's limits, argument checks and result), ``_argv`` (the
bwrap command line), ``_seccomp`` (the setuid filter), ``_protected`` (protected paths),
``_process`` (the process tree: spawn, drain, kill, reap), ``_probe`` (the start-up probe's
script) and ``_executors`` (``BubblewrapExecutor``, ``PlainExecutor``).
"""

from ._command import CommandLimits as CommandLimits
from ._command import CommandResult as CommandResult
from ._executors import BubblewrapExecutor as BubblewrapExecutor
from ._executors import PlainExecutor as PlainExecutor
from ._modes import ESCALATION_HINT as ESCALATION_HINT
from ._modes import SandboxMode as SandboxMode
from ._modes import SandboxUnavailableError as SandboxUnavailableError
from ._modes import denial_marker as denial_marker
from ._modes import looks_like_write_denial as looks_like_write_denial
from ._protected import DEFAULT_PROTECTED_PATHS as DEFAULT_PROTECTED_PATHS

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

from ..._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
