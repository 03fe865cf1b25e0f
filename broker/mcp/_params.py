"""The ``Mcp-Param-*`` headers of MCP's 2026-07-28 revision over streamable HTTP: a tool whose
``inputSchema`` marks a property with ``x-mcp-header: NAME`` has that argument's value mirrored
as the header ``Mcp-Param-NAME`` on every ``tools/call`` POST (the server refuses the call,
``HeaderMismatch``, when a header is missing or differs from the body).

Synopsis::

    tools = ToolHeaders()
    dropped = tools.learn(result)            # a tools/list result: [(name, why)] of invalid tools
    headers = tools.headers(params)          # ParamError: the call cannot be sent as it is
    value = header_value("é x")              # b"=?base64?w6kgeA==?="

The rules are the specification's (``basic/transports/streamable-http``, "Custom Headers from
Tool Parameters"): an annotation is a non-empty RFC 9110 token, case-insensitively unique in
its schema, on a ``string``, ``integer`` or ``boolean`` property reached from the root by
``properties`` keys only (never through ``items``, ``anyOf``, ``$ref``…); a tool with any
other annotation is invalid and left out of ``tools/list``. A value is sent as is when it is
visible ASCII or space without edge spaces, else as ``=?base64?…?=`` of its UTF-8 (so is a value
that looks like that sentinel); integers in decimal (within ±(2^53−1)), booleans as ``true`` or
``false``; a missing or ``null`` value sends no header. The gate's own bounds: a value that has
no such rendering (an object, an array, a fraction) or headers over :data:`MAX_HEADER_BYTES`
fail the call closed (:class:`ParamError`), never sent without its headers.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Final

import attrs

__all__ = ["MAX_HEADER_BYTES", "MAX_TOOLS", "ParamError", "ToolHeaders", "header_value"]

#: Tools whose annotations are remembered (the oldest is forgotten first: a call to it is then
#: sent without its headers, and the server refuses it).
MAX_TOOLS: Final = 1024
#: The most bytes of ``Mcp-Param-*`` headers one call may carry.
MAX_HEADER_BYTES: Final = 16 * 1024
_SAFE_INTEGER: Final = 2**53 - 1
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SAFE_VALUE = re.compile(r"[\x20-\x7e]*")
_SENTINEL = re.compile(r"=\?base64\?.*\?=", re.DOTALL)
_KEY: Final = "x-mcp-header"
_TYPES: Final = frozenset({"string", "integer", "boolean"})
# JSON Schema 2020-12's applicators: their values are schemas (off the properties chain).
# Instance data (default, const, enum, examples) is never entered, nor is $ref followed.
_ONE: Final = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_MANY: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_NAMED: Final = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})

#: The path of ``properties`` keys to an annotated property -> its ``x-mcp-header`` name.
Annotations = dict[tuple[str, ...], str]


class ParamError(ValueError):
    """A tool's annotations, or a call's value, that cannot become headers; says why."""


def header_value(value: str) -> bytes:
    """*value* as MCP's ``Mcp-Name`` and ``Mcp-Param-*`` headers carry it: verbatim when it is
    visible ASCII or space without edge spaces (and not the sentinel's shape), else
    ``=?base64?…?=`` of its UTF-8."""
    if _SAFE_VALUE.fullmatch(value) and value == value.strip() and not _SENTINEL.fullmatch(value):
        return value.encode("ascii")
    return b"=?base64?" + base64.b64encode(value.encode("utf-8", "surrogatepass")) + b"?="


def schema_headers(schema: object) -> Annotations:
    """The ``x-mcp-header`` annotations of the input schema *schema*; :class:`ParamError`
    naming the first invalid one."""
    found: Annotations = {}
    names: dict[str, str] = {}
    stack: list[tuple[tuple[str, ...] | None, object]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if _KEY in node:
            found[_checked(path, node, names)] = node[_KEY]
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                stack += [(None if path is None else (*path, k), v) for k, v in value.items()]
            elif keyword in _ONE:
                stack.append((None, value))
            elif keyword in _MANY and isinstance(value, list):
                stack += [(None, v) for v in value]
            elif keyword in _NAMED and isinstance(value, dict):
                stack += [(None, v) for v in value.values()]
    return found


def _checked(
    path: tuple[str, ...] | None, node: dict[str, Any], names: dict[str, str]
) -> tuple[str, ...]:
    if not path:
        raise ParamError(
            f"{_KEY} is allowed only on a property reached by properties keys from the root "
            "(not the root, nor under items, anyOf, $ref and the like)"
        )
    where = ".".join(path)
    name = node[_KEY]
    if not isinstance(name, str) or not _TOKEN.fullmatch(name):
        shown = repr(name)[:80] if isinstance(name, str) else type(name).__name__
        raise ParamError(f"property {where!r}: {_KEY} {shown} is not an HTTP header-name token")
    kind = node.get("type")
    if not isinstance(kind, str) or kind not in _TYPES:
        raise ParamError(
            f"property {where!r}: {_KEY} is allowed only on a string, integer or boolean "
            f"property, not type {str(kind)[:40]!r}"
        )
    other = names.setdefault(name.lower(), where)
    if other != where:
        raise ParamError(f"property {where!r}: {_KEY} {name!r} is also on property {other!r}")
    return path


def _rendered(value: object, where: str, header: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if abs(value) > _SAFE_INTEGER:
            raise ParamError(
                f"argument {where!r} is an integer beyond ±(2^53-1), which header {header} "
                "cannot carry exactly: pass a smaller one"
            )
        return str(value)
    if isinstance(value, str):
        return value
    kind = {dict: "an object", list: "an array", float: "a fraction"}.get(type(value), "a value")
    raise ParamError(
        f"argument {where!r} is {kind}, and the tool's schema mirrors it in header {header}, "
        "which carries only a string, an integer or a boolean: pass one of those"
    )


@attrs.define(eq=False)
class ToolHeaders:
    """The annotations of the tools the server listed (only those that have any), bounded by
    :data:`MAX_TOOLS`; a tool whose annotations are invalid is remembered with the reason."""

    _tools: dict[str, Annotations | str] = attrs.field(factory=dict)

    def learn(self, result: object) -> list[tuple[str, str]]:
        """Remember the annotations of the tools in *result* (a ``tools/list`` result); the
        tools whose annotations are invalid, with why (to be left out of the list)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        invalid: list[tuple[str, str]] = []
        for tool in tools if isinstance(tools, list) else ():
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                continue
            try:
                found: Annotations | str = schema_headers(tool.get("inputSchema"))
            except ParamError as exc:
                found = str(exc)
                invalid.append((name, found))
            self._tools.pop(name, None)
            if found:
                self._tools[name] = found
                if len(self._tools) > MAX_TOOLS:
                    del self._tools[next(iter(self._tools))]
        return invalid

    def headers(self, params: object) -> list[tuple[bytes, bytes]]:
        """The ``Mcp-Param-*`` headers of the ``tools/call`` whose params are *params*;
        :class:`ParamError` when the call cannot be sent with them."""
        name = params.get("name") if isinstance(params, dict) else None
        found = self._tools.get(name) if isinstance(name, str) else None
        if found is None:
            return []  # no annotations, or a tool never listed: the server judges
        assert isinstance(params, dict)
        if isinstance(found, str):
            raise ParamError(
                f"the server's definition of tool {name!r} is invalid ({found}), so the gate "
                "left it out of tools/list: fix the server's tool schema"
            )
        arguments = params.get("arguments")
        headers: list[tuple[bytes, bytes]] = []
        size = 0
        for path, header_name in found.items():
            value: object = arguments
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                continue  # no value at that path: no header
            header = f"Mcp-Param-{header_name}"
            encoded = header_value(_rendered(value, ".".join(path), header))
            size += len(header) + len(encoded)
            if size > MAX_HEADER_BYTES:
                raise ParamError(
                    f"the arguments tool {name!r} mirrors in Mcp-Param-* headers take over "
                    f"{MAX_HEADER_BYTES} bytes, more than the gate sends: pass shorter values"
                )
            headers.append((header.lower().encode("ascii"), encoded))
        return headers
