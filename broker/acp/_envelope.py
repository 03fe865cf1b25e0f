"""Envelope checks: what makes a JSON object a JSON-RPC 2.0 request, notification or response.

Pure functions over parsed messages, plus the error lines the connection answers with. Every
peer-controlled string (method names, ids, member names) is clipped before it reaches a message.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final, TypeAlias, TypeGuard

from .._framing import encode_line
from .._json_names import json_type
from ._errors import ErrorCode, JsonRpcError

__all__ = [
    "CANCEL_REQUEST_METHOD",
    "MISSING",
    "NOTIFICATION_KEYS",
    "REQUEST_KEYS",
    "RequestId",
    "check_method",
    "clip",
    "envelope_problem",
    "error_line",
    "invalid_line",
    "params_object",
    "response_problem",
    "valid_id",
]

logger = logging.getLogger("broker.acp")

#: ACP's protocol-level notification ``{"requestId": id}`` (schema ``CancelRequestNotification``).
CANCEL_REQUEST_METHOD: Final = "$/cancel_request"
MISSING: Final = object()

RequestId: TypeAlias = int | str | None

REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
NOTIFICATION_KEYS = frozenset({"jsonrpc", "method", "params"})
_RESPONSE_KEYS = frozenset({"jsonrpc", "id", "result", "error"})
# Peer-controlled strings (method names, ids) are clipped to this many characters in messages.
_CLIP = 80


def valid_id(value: object) -> TypeGuard[RequestId]:
    """Whether *value* may be a JSON-RPC id here: a string, an integer or null."""
    return value is None or isinstance(value, str) or type(value) is int


def envelope_problem(message: dict[str, Any], keys: frozenset[str]) -> str | None:
    """What is wrong with a request's or notification's envelope, or None."""
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0": acp speaks json-rpc 2.0 only'
    if not isinstance(message.get("method"), str):
        return "method must be a string"
    params = message.get("params")
    if params is not None and not isinstance(params, dict | list):
        return f"params must be an object, got {json_type(params)}"
    extra = set(message) - keys
    if extra:
        allowed = ", ".join(sorted(keys))
        return f"unexpected members {clip(sorted(extra))}: a message may carry only {allowed}"
    return None


def response_problem(message: dict[str, Any]) -> str | None:
    """What is wrong with a response (its id already found outstanding), or None."""
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    extra = set(message) - _RESPONSE_KEYS
    if extra:
        return f"unexpected members {clip(sorted(extra))}"
    if "result" in message and "error" in message:
        return "a response carries a result or an error, not both"
    if "error" in message:
        error = message["error"]
        if not isinstance(error, dict):
            return f"error must be an object, got {json_type(error)}"
        if type(error.get("code")) is not int:
            return "error.code must be an integer"
        if not isinstance(error.get("message"), str):
            return "error.message must be a string"
        if set(error) - {"code", "message", "data"}:
            return "error has members other than code, message and data"
    return None


def invalid_line(request_id: RequestId, problem: str) -> bytes:
    """The -32600 "invalid request" answer naming *problem*."""
    return error_line(
        request_id, JsonRpcError(ErrorCode.INVALID_REQUEST, f"invalid request: {problem}")
    )


def error_line(request_id: RequestId, error: JsonRpcError) -> bytes:
    """The error response line for *request_id* (without ``data`` if that is not JSON)."""
    try:
        return encode_line({"jsonrpc": "2.0", "id": request_id, "error": error.to_dict()})
    except (TypeError, ValueError):
        logger.error("acp: error data for %r is not JSON; sent without data", request_id)
        bare = JsonRpcError(error.code, error.message)
        return encode_line({"jsonrpc": "2.0", "id": request_id, "error": bare.to_dict()})


def check_method(method: object, where: str) -> None:
    """Refuse a method name we are asked to send or register that is not a non-empty string."""
    if not isinstance(method, str) or not method:
        raise ValueError(f"{where}: method must be a non-empty string, got {method!r}")


def params_object(params: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The params object we send (ACP passes params by name, never as an array)."""
    if not isinstance(params, Mapping):
        raise TypeError(
            f"{where}: params must be a mapping (acp uses named params), got"
            f" {type(params).__name__}"
        )
    return dict(params)


def clip(value: object) -> str:
    """``repr(value)``, clipped for a message (it came from the peer)."""
    text = repr(value)
    return text if len(text) <= _CLIP else text[: _CLIP - 3] + "..."
