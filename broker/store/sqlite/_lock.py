"""The writer lock: at most one writer per store file, across processes and within one.

A writer holds an exclusive ``flock`` on ``<store>.lock`` for as long as it is open. ``flock``
locks belong to the open file description, so a second open in the same process conflicts too,
and the kernel drops the lock when the process dies (a crashed writer never leaves a stale lock).
The lock file itself stays on disk; removing it would race with the next writer. POSIX only.
"""

from __future__ import annotations

import fcntl
import os

import attrs

from .._protocol import StoreLockedError, StoreOpenError
from ._schema import lock_path_for

__all__ = ["WriterLock"]


@attrs.define(eq=False)
class WriterLock:
    """The lock of the store file ``store_path``; :meth:`acquire` never blocks."""

    store_path: str
    _fd: int | None = attrs.field(default=None, init=False)

    @property
    def path(self) -> str:
        """The lock file's path."""
        return lock_path_for(self.store_path)

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLockedError` (held) / :class:`StoreOpenError`."""
        if self._fd is not None:
            raise RuntimeError(f"lock '{self.path}' is already held by this object")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreOpenError(
                f"cannot open store file '{self.store_path}' for writing: cannot create lock "
                f"file '{self.path}' ({exc.strerror or exc}); fix the directory's permissions"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"store file '{self.store_path}' is locked by another writer (lock file "
                f"'{self.path}'): close the other broker process, or open the store read-only"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
