"""Globs of the rules: on tool names and plain arguments (``*`` matches anything), and on
paths (``*`` stays inside one segment, ``**`` spans segments).

Synopsis::

    name_glob("write_*").fullmatch("write_file")        # a match
    path_glob("/etc/**").fullmatch("/etc/ssh/sshd_config")  # a match; also "/etc" itself
    path_glob("docs/*.md").fullmatch("docs/a/b.md")      # None: * stays in one segment

Both compile to an anchored regular expression once, at load, and check the pattern first: an
unterminated ``[`` or a ``**`` that is not a whole path segment raises :class:`GlobError`
(the loader turns it into a refusal of the file), instead of silently matching literally as
:mod:`fnmatch` would.
"""

from __future__ import annotations

import re

__all__ = ["GlobError", "name_glob", "path_glob"]


class GlobError(ValueError):
    """A glob pattern that cannot be used; the message says what is wrong with it."""


def _bracket(pattern: str, i: int, *, in_path: bool) -> tuple[str, int]:
    """The regex of the class that opens at ``pattern[i] == "["`` and the index after it."""
    j = i + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1  # a leading ] is a member
    while j < len(pattern) and pattern[j] != "]":
        j += 1
    if j >= len(pattern):
        raise GlobError(f"unterminated [ at position {i} in {pattern!r}: close it with ]")
    body = pattern[i + 1 : j]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    escaped = "".join("\\" + c if c in "\\^[]" else c for c in body)
    if not escaped:
        raise GlobError(f"empty [] at position {i} in {pattern!r}: name at least one character")
    # In a path, a class never matches the separator (as * and ? do not).
    extra = "/" if in_path else ""
    if negate:
        return f"[^{escaped}{extra}]", j + 1
    return (f"(?!/)[{escaped}]" if in_path else f"[{escaped}]"), j + 1


def name_glob(pattern: str) -> re.Pattern[str]:
    """A glob on a name or a plain argument: ``*`` any text, ``?`` one character, ``[..]`` a
    class (``[!..]`` its complement). Case-sensitive, whole text."""
    return re.compile(_translate(pattern, in_path=False), re.DOTALL)


def _translate(text: str, *, in_path: bool) -> str:
    """The regex of *text* (a whole name, or one path segment: then nothing crosses ``/``)."""
    star, one = ("[^/]*", "[^/]") if in_path else (".*", ".")
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "*":
            out.append(star)
        elif c == "?":
            out.append(one)
        elif c == "[":
            part, i = _bracket(text, i, in_path=in_path)
            out.append(part)
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def path_glob(pattern: str) -> re.Pattern[str]:
    """A glob on a normalised path: ``*`` and ``?`` never cross ``/``; ``**`` as a whole segment
    matches any number of segments (``a/**`` matches ``a`` and everything under it,
    ``**/x`` an ``x`` at any depth)."""
    if not pattern:
        raise GlobError("an empty path pattern matches nothing: write a path or a glob")
    segments = pattern.split("/")
    out: list[str] = []
    last = len(segments) - 1
    for n, segment in enumerate(segments):
        if segment == "**":
            if n == last:
                # "a/**": a itself or anything below it; a lone "**": anything.
                out.append("(?:/.*)?" if n else ".*")
            else:
                out.append("(?:.*/)?" if n == 0 else "/(?:.*/)?")
            continue
        if "**" in segment:
            raise GlobError(f"** must be a whole path segment in {pattern!r}: write a/**/b or a/*b")
        if n and segments[n - 1] != "**":  # after "**" its pattern ends with the "/"
            out.append("/")
        out.append(_segment(pattern, segment))
    return re.compile("".join(out), re.DOTALL)


def _segment(pattern: str, segment: str) -> str:
    try:
        return _translate(segment, in_path=True)
    except GlobError:
        raise GlobError(
            f"unterminated [ in {pattern!r}: close it with ] (a class cannot hold /)"
        ) from None
