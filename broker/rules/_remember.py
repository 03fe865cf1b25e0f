"""Remembering an answer as a rule of the project: one ``[[rules]]`` table appended to the
project's rules file.

Synopsis::

    rule = remember_in_file(".broker/rules.toml", tool="bash", command="npm run", by="alice",
                            at="2026-12-06T18:00:00Z")
    rule.origin.describe()   # "project rule 3 of .broker/rules.toml"

The rule is the one the person was shown (``bash: npm run``): an ``allow`` on the tool's exact
name (glob characters in a name are matched literally) and, for a command, its prefix, with the
prefix itself as an ``examples`` entry so ``broker rules check`` keeps proving it. The new text
is loaded back (every rule of the file, as the file would load at start-up) before it replaces
the file, atomically (a temporary file, ``fsync``, ``rename``, then the folder's ``fsync``),
under an exclusive lock on the folder, so two processes remembering at once both land and a file
that would not load is never written. Blocking file I/O: call it through ``trio.to_thread``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import tempfile
import tomllib

from ._load import RulesFileError, parse_rules
from ._model import Layer, Rule
from ._shell import split_words

__all__ = ["literal_glob", "remember_in_file"]


def literal_glob(name: str) -> str:
    """*name* as a glob that matches exactly it (``*``, ``?`` and ``[`` in brackets)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _toml_string(text: str) -> str:
    # JSON's string escapes are TOML's basic-string escapes, but for DEL, which TOML forbids raw.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _table(tool: str, command: str | None, by: str | None, at: str) -> str:
    who = f" by {by}" if by else ""
    # A comment is one line: whatever *by* holds cannot end it and start a table of its own.
    note = f"# remembered{who} at {at}".replace("\n", " ").replace("\r", " ")
    lines = [note, "[[rules]]", 'decision = "allow"', f"tool = {_toml_string(literal_glob(tool))}"]
    if command is not None:
        lines.append(f"command = {_toml_string(command)}")
        lines.append(f"examples = [{_toml_string(command)}]")
    return "\n".join(lines) + "\n"


def remember_in_file(
    path: str | os.PathLike[str],
    *,
    tool: str,
    command: str | None,
    by: str | None,
    at: str,
) -> Rule:
    """Append the allow rule of *tool* (and *command*'s prefix) to the project rules file at
    *path* (created, with its folder, when missing) and return it as loaded from the new file.
    Raises :class:`RulesFileError` when the file does not load now (nothing is written: fix it
    first) and ``ValueError`` for a *command* that is not one simple command."""
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError(f"tool must be a non-empty tool name, got {tool!r}")
    if command is not None and split_words(command) is None:
        raise ValueError(
            f"command must be one simple command (a program and its first words), got "
            f"{command!r}: remember a prefix such as 'npm run'"
        )
    file = pathlib.Path(os.fspath(path))
    where = os.fspath(path)
    folder = file.parent
    folder.mkdir(parents=True, exist_ok=True)
    lock = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            old = file.read_text(encoding="utf-8")
            mode = file.stat().st_mode & 0o777
        except FileNotFoundError:
            old, mode = "", 0o644
        separator = (
            "" if not old or old.endswith("\n\n") else ("\n" if old.endswith("\n") else "\n\n")
        )
        new = old + separator + _table(tool, command, by, at)
        try:
            rules = parse_rules(tomllib.loads(new), where=where, layer=Layer.PROJECT)
        except tomllib.TOMLDecodeError as exc:
            raise RulesFileError(
                [f"rules file {where}: not TOML ({exc}): fix the file before remembering in it"]
            ) from None
        _replace(file, new, mode)
        os.fsync(lock)  # the rename itself is durable
    finally:
        os.close(lock)
    remembered = [r for r in rules if r.origin.index == _tables(new)]
    return remembered[0]


def _tables(text: str) -> int:
    data = tomllib.loads(text).get("rules", [])
    return len(data) if isinstance(data, list) else 0


def _replace(file: pathlib.Path, text: str, mode: int) -> None:
    fd, temporary = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(temporary, file)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
