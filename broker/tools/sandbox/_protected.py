"""Protected paths: the workspace entries kept read-only in ``workspace-write``, and the
removal of those a command created where none existed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pathlib
    from collections.abc import Sequence


DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (".git", ".claude", ".codex", ".agents", ".broker")
"""Workspace entries kept read-only in ``workspace-write`` (Codex's ``.git`` and ``.codex`` are
the floor; ``.claude`` holds Claude Code settings and hooks; ``.broker`` this project's)."""


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
