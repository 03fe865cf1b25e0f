"""The codec helpers the event codec and the ACP wire share: JSON names and JSON type names.

One place, so the two layers cannot disagree again (they did: an ``int`` was an "integer" in
one message and a "number" in the other). JSON has one numeric type, so both are "number".
"""

from __future__ import annotations

import re

__all__ = ["camel", "camel_path", "json_type"]

_SNAKE_IN_PATH = re.compile(r"(?<=[a-z0-9])_([a-z])")


def camel(name: str) -> str:
    """``tool_call_id`` -> ``toolCallId`` (wire names are camelCase; attributes snake_case)."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def camel_path(path: str) -> str:
    """A cattrs error path in wire names, per identifier: ``$.client_capabilities.terminal`` ->
    ``$.clientCapabilities.terminal``."""
    return _SNAKE_IN_PATH.sub(lambda m: m.group(1).upper(), path)


def json_type(value: object) -> str:
    """The JSON type of a decoded value, for error messages (``null``, ``boolean``, …)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
