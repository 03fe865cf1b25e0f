"""The mode vocabulary: the three sandbox modes, the two texts the model sees when a write
is refused, the heuristic that spots such a refusal, and the error for a host with no sandbox.
"""

from __future__ import annotations

import enum
import re

from ..._errors import BrokerError


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
