"""A call's arguments, bound to its approval: a canonical digest of exactly what will run.

Synopsis::

    req = ApprovalRequest(agent=a, tool_name="bash", arguments={"command": "git status"})
    decision = await broker.request_decision(req)
    ...
    if not decision.covers(call.arguments):     # right before running
        refuse()                                # something changed since the approval

The digest is ``sha256:`` and the hex SHA-256 of the arguments' canonical JSON (keys sorted,
no spaces, non-ASCII kept, no NaN or infinity), so two equal objects have one digest whatever
their key order, and any changed value, key or type changes it. The request keeps its own
deep copy, so the caller changing its dict afterwards changes neither the question nor the
digest.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Mapping
from typing import Any

__all__ = ["arguments_digest", "freeze_arguments"]


def _canonical(arguments: object, parameter: str) -> str:
    if not isinstance(arguments, Mapping) or not all(isinstance(k, str) for k in arguments):
        raise TypeError(
            f"{parameter} must be a mapping of argument names to JSON values, got "
            f"{type(arguments).__name__}: pass the tool's input object"
        )
    try:
        return json.dumps(
            dict(arguments),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{parameter} must hold only JSON values ({exc}): pass what the tool will run with"
        ) from None


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def arguments_digest(arguments: object, parameter: str = "arguments") -> str:
    """The digest of *arguments* (module doc). Raises :class:`TypeError` for a non-mapping
    and :class:`ValueError` for a value JSON cannot hold."""
    return _digest(_canonical(arguments, parameter))


def freeze_arguments(arguments: object) -> tuple[Mapping[str, Any], str]:
    """A read-only deep copy of *arguments* and its digest."""
    text = _canonical(arguments, "arguments")
    return types.MappingProxyType(json.loads(text)), _digest(text)
