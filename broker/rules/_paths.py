"""Path arguments, normalised before a rule sees them.

Synopsis::

    normalise_path("docs/../.git/config")          # ".git/config": not under docs/**
    normalise_path("/etc/./ssh//sshd_config")      # "/etc/ssh/sshd_config"
    normalise_path("~/.ssh/id_ed25519", home="/root")   # "/root/.ssh/id_ed25519"
    normalise_path("../outside")                   # None: cannot be normalised
    normalise_path("notes.txt", cwd="/work")       # "/work/notes.txt"

Normalisation is lexical (``.``, ``..``, repeated ``/``, a leading ``~``), as the path was
written; symbolic links are not followed (the sandbox, not a rule, is the boundary of what a
process can reach). What cannot be normalised — not a string, empty, a NUL byte, a ``..`` that
climbs above a relative path's start, ``~user`` — is ``None``, which matches no allow rule.
"""

from __future__ import annotations

import os

__all__ = ["PATH_KEYS", "is_path_key", "normalise_path"]

#: Argument names read as paths (and any name ending in ``path``, ``file`` or ``dir``).
PATH_KEYS = frozenset(
    {
        "path",
        "paths",
        "file",
        "files",
        "file_path",
        "filePath",
        "filepath",
        "notebook_path",
        "dir",
        "directory",
        "cwd",
        "workdir",
        "target",
        "source",
        "destination",
        "src",
        "dst",
    }
)


def is_path_key(key: str) -> bool:
    """Whether an argument named *key* holds a path (normalised before matching)."""
    lowered = key.lower()
    return key in PATH_KEYS or lowered.endswith(("path", "paths", "file", "dir"))


def normalise_path(value: object, *, cwd: str | None = None, home: str | None = None) -> str | None:
    """*value* as a lexically normal path, or ``None`` when it cannot be normalised (module
    doc). A relative path is joined to *cwd* when one is given; ``~`` is *home* (the user's
    home directory by default)."""
    if not isinstance(value, str) or not value or "\0" in value:
        return None
    path = value
    if path == "~" or path.startswith("~/"):
        base = home if home is not None else os.path.expanduser("~")
        if base.startswith("~"):
            return None
        path = base + path[1:]
    elif path.startswith("~"):
        return None  # ~user: whose home it is depends on this host's users
    if not path.startswith("/") and cwd is not None:
        if not cwd.startswith("/"):
            return None
        path = cwd + "/" + path
    absolute = path.startswith("/")
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if parts:
                parts.pop()
            elif not absolute:
                return None  # climbs above where a relative path starts
            continue
        parts.append(segment)
    if absolute:
        return "/" + "/".join(parts)
    return "/".join(parts) or "."
