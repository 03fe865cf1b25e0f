"""Validate JSON-RPC frames and ACP values against the ACP v1 JSON Schema (a test helper).

The schema is ``tests/fixtures/acp/schema.json`` (see the README next to it). Its top level is
an ``anyOf`` whose branches accept any extension message, so a frame is checked twice: the
envelope against the side's branch (``Agent``/``Client``/``ProtocolLevel``), and the params or
result against the exact type the schema ties to the method (``x-method``/``x-side``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema  # type: ignore[import-untyped]

SCHEMA_PATH = Path(__file__).parent / "fixtures" / "acp" / "schema.json"

Side = Literal["agent", "client"]


@cache
def schema() -> dict[str, Any]:
    """The parsed schema document."""
    loaded: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return loaded


def _defs() -> dict[str, Any]:
    defs: dict[str, Any] = schema()["$defs"]
    return defs


def _validator(subschema: dict[str, Any]) -> Any:
    document = {"$schema": schema()["$schema"], "$defs": _defs(), **subschema}
    return jsonschema.Draft202012Validator(document)


def validate_value(def_name: str, value: object) -> None:
    """Validate *value* against ``$defs/<def_name>``; raises ``jsonschema.ValidationError``."""
    if def_name not in _defs():
        raise KeyError(f"the acp schema has no definition {def_name!r}")
    _validator({"$ref": f"#/$defs/{def_name}"}).validate(value)


def _branch(title: str) -> dict[str, Any]:
    for branch in schema()["anyOf"]:
        if branch.get("title") == title:
            found: dict[str, Any] = branch
            return found
    raise KeyError(f"the acp schema has no top-level branch {title!r}")


def def_for(method: str, suffix: str, handled_by: str) -> str:
    """The ``$defs`` name for *method*'s ``Request``/``Response``/``Notification`` type.

    *handled_by* is the schema's ``x-side``: the side that receives the request (and so sends
    the response) or the notification; ``protocol`` for ``$/`` methods.
    """
    for name, definition in _defs().items():
        if (
            name.endswith(suffix)
            and definition.get("x-method") == method
            and definition.get("x-side") == handled_by
        ):
            return name
    raise KeyError(f"the acp schema has no {suffix} for {method!r} handled by {handled_by}")


def validate_frame(frame: dict[str, Any], sender: Side, method: str | None = None) -> None:
    """Validate one JSON-RPC message that *sender* wrote.

    Requests and notifications name their method; a result response needs *method*, the
    method of the request it answers. Error responses are checked against ``Error``.
    """
    receiver = "client" if sender == "agent" else "agent"
    if frame.get("jsonrpc") != "2.0":
        raise AssertionError(f'frame must carry "jsonrpc": "2.0": {frame!r}')
    frame_method = frame.get("method")
    if isinstance(frame_method, str) and frame_method.startswith("$/"):
        _validator(_branch("ProtocolLevel")).validate(frame)
        params_def = def_for(frame_method, "Notification", "protocol")
        validate_value(params_def, frame.get("params"))
        return
    _validator(_branch(sender.title())).validate(frame)
    if isinstance(frame_method, str):
        suffix = "Request" if "id" in frame else "Notification"
        validate_value(def_for(frame_method, suffix, receiver), frame.get("params"))
    elif "error" in frame:
        validate_value("Error", frame["error"])
    else:
        if method is None:
            raise ValueError("validate_frame: a result response needs method=<the request's>")
        validate_value(def_for(method, "Response", sender), frame["result"])


def validate_agent_frame(frame: dict[str, Any], method: str | None = None) -> None:
    """Validate a frame the agent (we) sent: our request, a notification, or a response.

    For a result response pass *method*, the method of the client's request it answers.
    """
    validate_frame(frame, "agent", method)


def validate_client_frame(frame: dict[str, Any], method: str | None = None) -> None:
    """Validate a frame a client sends (what tests play as the peer)."""
    validate_frame(frame, "client", method)


def validate_agent_traffic(sent: list[dict[str, Any]], received: list[dict[str, Any]]) -> int:
    """Validate every frame the agent sent, pairing responses with the requests they answer.

    *sent* and *received* are what a ``FrameRecorder`` saw. Error responses with ``id: null``
    (answers to garbage) are checked against ``Error`` only. Returns how many were checked.
    """
    methods = {
        json.dumps(frame["id"]): frame["method"]
        for frame in received
        if "method" in frame and "id" in frame and isinstance(frame["method"], str)
    }
    for frame in sent:
        method = None if "method" in frame else methods.get(json.dumps(frame.get("id")))
        validate_agent_frame(frame, method)
    return len(sent)
