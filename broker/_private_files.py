"""Files and folders only their owner can read: the log holds every command an agent asked to
run, its arguments and the reasons.

Synopsis::

    make_private_dirs(path.parent)      # each folder it creates: 0700, whatever the umask
    create_private_file(path)           # a new file: 0600; an existing one is used as it is,
                                        # with one warning line if others can read it
    check_secret_file(path, "--token-file")   # refused unless it is yours and 0600-ish

What the broker creates is private whatever the umask (a mode is set, then forced with
``chmod``: a umask can only take bits away, never add them, but a ``0o000`` umask would leave
a default ``0666``). What the user created is theirs: an existing store with wider permissions
is used as it is, after one warning naming the file and the ``chmod`` that fixes it. A secret
(a token) is different: like OpenSSH with a private key, a token file that its owner does not
own, or that group or others can read, is refused.
"""

from __future__ import annotations

import logging
import os
import stat

__all__ = ["check_secret_file", "create_private_file", "make_private_dirs", "warn_if_shared"]

log = logging.getLogger("broker.files")

_SHARED = stat.S_IRWXG | stat.S_IRWXO


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create *path* and its missing parents, each ``0700`` (existing folders are left as
    they are). Raises :class:`OSError` as :func:`os.mkdir` does."""
    folder = os.path.abspath(os.fspath(path))
    missing: list[str] = []
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o700)
        except FileExistsError:
            continue  # made meanwhile by another process: theirs to set
        os.chmod(created, 0o700)


def create_private_file(path: str | os.PathLike[str], *, warn: bool = True) -> bool:
    """Create *path* empty with mode ``0600`` if it does not exist (True); else leave it and,
    with *warn*, warn if others can read it (False). Raises :class:`OSError`."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        if warn:
            warn_if_shared(where)
        return False
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return True


def warn_if_shared(path: str | os.PathLike[str]) -> None:
    """One warning line if group or others may read or write *path* (nothing if it is gone)."""
    where = os.fspath(path)
    try:
        mode = os.stat(where).st_mode
    except OSError:
        return
    if mode & _SHARED:
        log.warning(
            "%s is readable by others (mode %04o): it holds the agents' commands and reasons; "
            "chmod 600 %s to keep it private",
            where,
            stat.S_IMODE(mode),
            where,
        )


def check_secret_file(path: str | os.PathLike[str], parameter: str) -> None:
    """Raise :class:`PermissionError` (one line naming *parameter*, the file and the fix) unless
    *path* is owned by this process's user and neither group nor others can read or write it."""
    where = os.fspath(path)
    info = os.stat(where)
    uid = os.geteuid()
    if info.st_uid != uid:
        raise PermissionError(
            f"{parameter} {where}: owned by uid {info.st_uid}, not by you (uid {uid}); a secret "
            f"must be yours: chown {uid} {where} && chmod 600 {where}"
        )
    if info.st_mode & _SHARED:
        raise PermissionError(
            f"{parameter} {where}: group or others can read it (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); a secret must be yours alone: chmod 600 {where}"
        )
