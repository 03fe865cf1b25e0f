"""The one formatter of cattrs structuring errors: a list of path-named, lower-case problems.

Every decoder built on a cattrs converter (log events, checkpoints, scenarios, ACP wire values,
composition settings) turns a failed ``structure`` into ``"<what is wrong> @ <path>"`` strings
through :func:`problems`, so the same mistake reads the same wherever it is found. Paths are in
wire names (``$.steps[0].toolCalls``), never Python attribute names, and quote key names and
tags, never the values the peer sent.

A structure hook that knows better than cattrs what went wrong raises :class:`StructureProblem`;
its message is shown as is, with the path appended.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.v import format_exception

from ._json_names import camel, camel_path

__all__ = ["STRUCTURE_ERRORS", "StructureProblem", "path_first", "problems"]

#: How many unexpected keys a message names before it says "...".
_SHOWN_KEYS = 5
#: Longest key name shown as is; longer ones are clipped (key names come from the peer).
_KEY_WIDTH = 40


class StructureProblem(ValueError):
    """A structure hook's own complaint; :func:`problems` shows its message as is."""


#: What ``converter.structure`` raises for bad input: catch these, then call :func:`problems`.
STRUCTURE_ERRORS = (cattrs.BaseValidationError, ValueError, TypeError, KeyError)


def problems(
    exc: BaseException,
    *,
    extra_keys_hint: str | None = None,
    wire_names: bool = True,
) -> tuple[str, ...]:
    """The problems of a failed ``converter.structure``, each ``"<problem> @ <path>"``.

    *exc* is what ``structure`` raised: a cattrs validation error (one problem per failing
    leaf) or a hook's exception raised before any field was reached (one problem at ``$``).
    *extra_keys_hint* replaces the default advice after "unexpected keys (…)". With
    *wire_names* paths and key names are camelCase (the JSON forms of the codec's classes);
    without, they are the attribute names (settings files use those).

    Synopsis::

        try:
            return converter.structure(data, cls)
        except STRUCTURE_ERRORS as exc:
            raise MyDecodeError("; ".join(problems(exc))) from exc
    """

    name = camel if wire_names else str
    rename = camel_path if wire_names else str

    def describe(error: BaseException, type_: Any) -> str:
        return _describe(error, type_, extra_keys_hint, name)

    if isinstance(exc, cattrs.BaseValidationError):
        messages = cattrs.transform_error(exc, format_exception=describe)
    else:
        messages = [f"{describe(exc, None)} @ $"]
    out = []
    for message in messages:
        text, sep, path = message.rpartition(" @ ")
        out.append(f"{text}{sep}{rename(path)}" if sep else message)
    return tuple(out)


def path_first(problem: str) -> str:
    """``"<problem> @ $.a[2].b"`` as ``"a[2].b: <problem>"`` (a problem at the root unchanged).

    For settings, where the reader looks for the key first.
    """
    text, sep, path = problem.rpartition(" @ ")
    if not sep or path == "$":
        return text if sep else problem
    return f"{path.removeprefix('$.')}: {text}"


def _describe(
    exc: BaseException, type_: Any, extra_keys_hint: str | None, name: Callable[[str], str]
) -> str:
    if isinstance(exc, StructureProblem):
        return str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        shown = [
            key if len(key) <= _KEY_WIDTH else key[: _KEY_WIDTH - 3] + "..."
            for key in sorted(exc.extra_fields)
        ]
        keys = ", ".join(shown[:_SHOWN_KEYS]) + (", ..." if len(shown) > _SHOWN_KEYS else "")
        if extra_keys_hint is None:
            known = [name(f.name) for f in attrs.fields(exc.cl)] if attrs.has(exc.cl) else []
            extra_keys_hint = f"expected only {', '.join(known)}" if known else "remove them"
        return f"unexpected keys ({keys}): {extra_keys_hint}"
    if isinstance(exc, KeyError):
        return "required field missing"
    # An optional field reports its union type; the enum is the one member that is not None.
    members = [t for t in typing.get_args(type_) if t is not type(None)] or [type_]
    target = members[0] if len(members) == 1 else None
    if isinstance(exc, ValueError) and isinstance(target, type) and issubclass(target, enum.Enum):
        return f"expected one of {', '.join(str(member.value) for member in target)}"
    return format_exception(exc, type_)
