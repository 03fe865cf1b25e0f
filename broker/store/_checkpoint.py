"""Projection checkpoints: :class:`ApprovalState` to and from its stored JSON form.

The state is encoded through the one converter (:mod:`broker._codec`): camelCase keys, unset
fields omitted, and ``frozenset[str]`` fields as *sorted* JSON lists so that equal states have
equal bytes. A checkpoint is a cache of ``fold_all(events[:seq])``; the event log stays
authoritative and ``broker log verify`` re-folds to check it.

A cache must die with the code that filled it: each checkpoint is stored with
:data:`PROJECTION_FINGERPRINT`, a hash of the projection module's source (the fold and the state
class). After any change to that module, older checkpoints are ignored — the next open folds
those sessions from their first event and writes fresh checkpoints — so a new field or a new
fold rule never meets a state folded by the old code.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from typing import Any

import attrs

from .. import _projection
from .._cattrs_errors import STRUCTURE_ERRORS, StructureProblem, problems
from .._codec import converter, register_wire_type, utf8_safe
from .._errors import BrokerError
from .._json_names import json_type
from .._projection import ApprovalState, Grant

__all__ = ["PROJECTION_FINGERPRINT", "CheckpointDecodeError", "decode_state", "encode_state"]


def _fingerprint() -> str:
    try:
        source = inspect.getsource(_projection)
    except (OSError, TypeError):  # no source shipped: fall back to the state's shape
        source = repr([(f.name, str(f.type), f.default) for f in attrs.fields(ApprovalState)])
    return hashlib.sha256(source.encode()).hexdigest()[:16]


#: Identifies the fold that produced a checkpoint; see the module docstring.
PROJECTION_FINGERPRINT = _fingerprint()


class CheckpointDecodeError(BrokerError, ValueError):
    """A stored checkpoint is not a well-formed :class:`ApprovalState`."""


def _is_str_frozenset(tp: Any) -> bool:
    return bool(tp == frozenset[str])


def _unstructure_str_set(value: frozenset[str]) -> list[str]:
    return sorted(value)


def _structure_str_set(value: object, _tp: object) -> frozenset[str]:
    if not isinstance(value, list):
        raise StructureProblem(f"expected an array of strings, got {json_type(value)}")
    for item in value:
        if not isinstance(item, str):
            raise StructureProblem(f"expected an array of strings, got a {json_type(item)} in it")
    return frozenset(value)


# Invariant: the frozenset hooks are registered before the ApprovalState hooks are generated,
# because cattrs binds field hooks when it generates a class's hook.
converter.register_unstructure_hook_func(_is_str_frozenset, _unstructure_str_set)
converter.register_structure_hook_func(_is_str_frozenset, _structure_str_set)
register_wire_type(Grant)
register_wire_type(ApprovalState)


def encode_state(state: ApprovalState) -> str:
    """The compact JSON form of *state* (deterministic: sorted sets, field order)."""
    data = converter.unstructure(state, ApprovalState)
    return utf8_safe(json.dumps(data, separators=(",", ":"), ensure_ascii=False))


def decode_state(text: str) -> ApprovalState:
    """Decode :func:`encode_state` output; raises :class:`CheckpointDecodeError` with the cause."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CheckpointDecodeError(f"not valid JSON: {exc.msg} at column {exc.colno}") from exc
    if not isinstance(data, dict):
        raise CheckpointDecodeError(f"expected a JSON object, got {type(data).__name__}")
    try:
        return converter.structure(data, ApprovalState)
    except STRUCTURE_ERRORS as exc:
        raise CheckpointDecodeError("; ".join(problems(exc))) from exc
