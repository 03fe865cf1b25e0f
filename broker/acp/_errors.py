"""The ACP layer's exceptions and the JSON-RPC error codes the ACP v1 schema names."""

from __future__ import annotations

import enum
from typing import Any

from .._errors import BrokerError

__all__ = ["ConnectionClosed", "ErrorCode", "JsonRpcError", "WireDecodeError"]


class ErrorCode(enum.IntEnum):
    """The error codes of the ACP v1 schema (``$defs/ErrorCode``); peers may send others."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    #: LSP's code, adopted by ACP: the answer to a request its sender cancelled.
    REQUEST_CANCELLED = -32800
    AUTH_REQUIRED = -32000
    RESOURCE_NOT_FOUND = -32002


class JsonRpcError(BrokerError):
    """A JSON-RPC error object, as an exception.

    Raise it from a request handler to answer with exactly this error;
    ``JsonRpcConnection.request`` raises it when the peer answers with an error. *data* must
    be JSON-encodable (otherwise the error is sent without it).
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = int(code)
        self.message = message
        self.data = data

    def to_dict(self) -> dict[str, Any]:
        """The ``error`` member of a response: ``{"code", "message"[, "data"]}``."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error

    def __repr__(self) -> str:
        return f"JsonRpcError({self.code}, {self.message!r}, data={self.data!r})"


class ConnectionClosed(BrokerError):
    """The JSON-RPC connection ended (end of input, broken pipe, ``aclose`` or cancellation).

    Every request still waiting for its response raises this, and so do ``request``/``notify``
    calls made afterwards. :attr:`reason` says who or what closed it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the acp connection is closed ({reason}): its requests cannot be answered any more;"
            " open a new connection"
        )
        self.reason = reason


class WireDecodeError(BrokerError, ValueError):
    """A JSON value is not a well-formed ACP wire value; :attr:`errors` lists each problem.

    Every entry names the offending path in wire (camelCase) form, e.g.
    ``expected a string, got number @ $.sessionId``.
    """

    def __init__(self, message: str, errors: tuple[str, ...]) -> None:
        super().__init__(message)
        self.errors = errors
