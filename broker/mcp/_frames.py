"""The bytes of MCP's stdio transport as the gate sees them: one JSON-RPC message per line.

Synopsis::

    message = parse_frame(line)          # FrameError: the sender gets an error, nothing passes
    kind = classify(message)             # REQUEST / NOTIFICATION / RESPONSE
    key = id_key(message["id"])          # "1" and 1 are different ids, and so are 1 and true

The gate forwards the bytes it received, so it parses strictly, to read what every peer will
read: a duplicated key anywhere (``{"method":"ping","method":"tools/call"}`` is ``ping`` to a
first-key-wins parser and ``tools/call`` to Python), ``NaN``, bad UTF-8 and nesting deeper than
:data:`MAX_DEPTH` are refused, so no frame means one thing to the gate and another upstream.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Final

# One encoder of JSON lines for ACP and MCP alike: compact, lone surrogates escaped.
from .._framing import encode_line as encode

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_DEPTH",
    "METHOD_NOT_FOUND",
    "PARSE_ERROR",
    "SERVER_ERROR",
    "FrameError",
    "Kind",
    "classify",
    "encode",
    "error_response",
    "id_key",
    "is_gated_method",
    "parse_frame",
    "valid_id",
]

#: Deeper JSON than this is refused (Python's parser would raise RecursionError near 1000).
MAX_DEPTH: Final = 64

# JSON-RPC's error codes, as the gate uses them.
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
PARSE_ERROR: Final = -32700
#: The implementation-defined server error: the server did not, or could not, answer.
SERVER_ERROR: Final = -32000


class FrameError(ValueError):
    """A line that is not one well-formed JSON-RPC message; the text says what is wrong."""


class Kind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise FrameError(f"duplicate key {key!r} in a JSON object: send each key once")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise FrameError(f"{name} is not JSON")


def _depth(value: object, level: int = 0) -> None:
    # Iterative enough: values deeper than MAX_DEPTH stop the walk at once.
    if level > MAX_DEPTH:
        raise FrameError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        for item in value.values():
            _depth(item, level + 1)
    elif isinstance(value, list):
        for item in value:
            _depth(item, level + 1)


def parse_frame(line: bytes) -> object:
    """The JSON value of one line, parsed strictly (module doc); :class:`FrameError` if none."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrameError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    # Cheap guard before the parser recurses: count the brackets a deep value needs.
    if text.count("[") + text.count("{") > MAX_DEPTH and _bracket_depth(text) > MAX_DEPTH:
        raise FrameError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except FrameError:
        raise
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"not JSON ({exc})") from None
    _depth(value)
    return value


def _bracket_depth(text: str) -> int:
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def is_gated_method(method: str) -> bool:
    """Whether *method* names ``tools/call`` for some peer: exactly, or spelled loosely (case,
    surrounding space), which a lenient server might route to its tool handler."""
    return method.strip().lower() == "tools/call"


def valid_id(value: object) -> bool:
    """A JSON-RPC id MCP allows: a string or an integer (never null, a bool or a float)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def id_key(value: object) -> str:
    """The id as the gate keys it: its JSON text, so ``1``, ``"1"`` and ``true`` differ."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":"))


def classify(message: dict[str, Any]) -> Kind:
    """What *message* is; :class:`FrameError` when it is none of them.

    Anything with a ``method`` key is a request (with ``id``) or a notification, whatever else
    it carries: a ``tools/call`` dressed as a response is still gated.
    """
    if "method" in message:
        if not isinstance(message["method"], str):
            raise FrameError("method must be a string")
        return Kind.REQUEST if "id" in message else Kind.NOTIFICATION
    if "id" in message and ("result" in message or "error" in message):
        return Kind.RESPONSE
    raise FrameError("neither a request, a notification nor a response")


def error_response(request_id: object, code: int, message: str) -> bytes:
    """A JSON-RPC error response line (``id`` null when the request's id is unknown)."""
    return encode({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})
