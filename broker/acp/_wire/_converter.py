"""The ACP wire converter: strict JSON scalars, wire classes, tagged unions, encode and decode.

ACP values are encoded by the one converter (:mod:`broker._codec`). This module adds what the
wire needs on top: :data:`Str`/:data:`Int`/... accept exactly their JSON type; :func:`wire`
registers a class (its hooks are generated on first use, so a class is named once, where it is
defined); :func:`wire_union` encodes and decodes a union by a tag key, with the tags the
variants' :func:`wire` decorators gave. Decoding errors are :class:`WireDecodeError` listing
each problem with its camelCase path (:mod:`broker._cattrs_errors`).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Annotated, Any, TypeAlias, TypeVar

import attrs

from ..._cattrs_errors import STRUCTURE_ERRORS, StructureProblem, problems
from ..._codec import converter, wire_hooks
from ..._json_names import camel, json_type
from .._errors import ErrorCode, JsonRpcError, WireDecodeError

__all__ = [
    "Bool",
    "Int",
    "Object",
    "Seq",
    "Str",
    "from_wire",
    "params_from_wire",
    "to_wire",
    "wire",
    "wire_union",
]

T = TypeVar("T")
C = TypeVar("C", bound=type[Any])

#: What a peer is told to do with keys ACP does not define (they belong in ``_meta``).
_EXTRA_KEYS_HINT = "acp reserves them; put extensions under _meta"
_META = "_meta"


# -- strict JSON scalars ----------------------------------------------------------------------


class _Strict:
    """``Annotated`` marker: accept only this exact JSON type (cattrs would coerce by default)."""


Str: TypeAlias = Annotated[str, _Strict]
Int: TypeAlias = Annotated[int, _Strict]
Bool: TypeAlias = Annotated[bool, _Strict]
Object: TypeAlias = Annotated[dict[str, Any], _Strict]
#: A JSON array, structured item by item (a string is not a sequence of characters here).
Seq: TypeAlias = Annotated[tuple[T, ...], _Strict]


def _is_strict(type_: object) -> bool:
    return typing.get_origin(type_) is Annotated and _Strict in getattr(type_, "__metadata__", ())


def _structure_strict(value: object, type_: Any) -> Any:
    base = type_.__origin__
    origin = typing.get_origin(base) or base
    expected = {str: "string", int: "number", bool: "boolean", tuple: "array", dict: "object"}
    ok = {
        str: isinstance(value, str),
        int: type(value) is int,
        bool: isinstance(value, bool),
        tuple: isinstance(value, list),
        dict: isinstance(value, dict),
    }[origin]
    if not ok:
        article = "an" if expected[origin][0] in "ao" else "a"
        raise StructureProblem(f"expected {article} {expected[origin]}, got {json_type(value)}")
    if origin is tuple or origin is dict:
        return converter.structure(value, base)
    return value


converter.register_structure_hook_func(_is_strict, _structure_strict)


# -- wire classes -----------------------------------------------------------------------------


@attrs.frozen
class _Spec:
    tag: str | None
    tolerant: bool


# Every wire class, with its tag in its union and whether it tolerates unknown keys.
_SPECS: dict[type[Any], _Spec] = {}


def wire(*, tag: str | None = None, tolerant: bool = False) -> Callable[[C], C]:
    """Class decorator: *cls* is an ACP wire value (camelCase keys, unset optionals omitted).

    *tag* is its value of the tag key in the union it belongs to (see :func:`wire_union`).
    *tolerant* drops unknown keys instead of refusing them (the module docstring of
    :mod:`broker.acp._wire` says which classes, and why); otherwise only ``_meta`` is dropped.
    """

    def register(cls: C) -> C:
        _SPECS[cls] = _Spec(tag, tolerant)
        return cls

    return register


def _structure_factory(cls: type[Any]) -> Callable[[object, Any], Any]:
    _unstructure, generated = wire_hooks(cls)
    known = frozenset(camel(f.name) for f in attrs.fields(cls))
    tolerant = _SPECS[cls].tolerant

    def structure(value: object, type_: Any) -> Any:
        if not isinstance(value, dict):
            raise StructureProblem(f"expected an object, got {json_type(value)}")
        if tolerant:
            value = {k: v for k, v in value.items() if k in known}
        elif _META in value:
            value = {k: v for k, v in value.items() if k != _META}
        return generated(value, type_)

    return structure


def _unstructure_factory(cls: type[Any]) -> Callable[[Any], Any]:
    unstructure, _structure = wire_hooks(cls)
    return unstructure


# Generated on first use, when every wire class and union is registered: a class's generated
# hooks look up its fields' hooks when they are made.
def _is_wire_class(type_: object) -> bool:
    return isinstance(type_, type) and type_ in _SPECS


converter.register_structure_hook_factory(_is_wire_class, _structure_factory)
converter.register_unstructure_hook_factory(_is_wire_class, _unstructure_factory)


def wire_union(union: Any, what: str, tag_key: str, *, untagged: type[Any] | None = None) -> None:
    """Encode and decode *union* by the string at *tag_key* (our own errors for bad tags).

    The variants are the union's members, each tagged by its :func:`wire` decorator. The
    *untagged* variant has no tag key on the wire (it is still accepted with its tag).
    """
    variants: dict[str, type[Any]] = {}
    for cls in typing.get_args(union):
        tag = _SPECS[cls].tag
        if tag is None:
            raise ValueError(f"{cls.__name__} has no tag: decorate it with @wire(tag=...)")
        variants[tag] = cls
    tags = {cls: tag for tag, cls in variants.items()}
    expected = ", ".join(sorted(variants))

    def structure(value: object, _type: Any) -> Any:
        if not isinstance(value, dict):
            raise StructureProblem(f"{what} must be an object, got {json_type(value)}")
        if tag_key not in value:
            if untagged is not None:
                return converter.structure(value, untagged)
            raise StructureProblem(f"{what} has no {tag_key!r}: expected one of {expected}")
        tag = value[tag_key]
        cls = variants.get(tag) if isinstance(tag, str) else None
        if cls is None:
            shown = repr(tag) if isinstance(tag, str) and len(tag) <= 40 else json_type(tag)
            raise StructureProblem(
                f"{tag_key} {shown} is not a known {what}: expected one of {expected}"
            )
        return converter.structure({k: v for k, v in value.items() if k != tag_key}, cls)

    def unstructure(value: Any) -> dict[str, Any]:
        body: dict[str, Any] = converter.unstructure(value, type(value))
        if type(value) is untagged:
            return body
        return {tag_key: tags[type(value)], **body}

    def matches(type_: Any) -> bool:
        return bool(type_ == union)

    converter.register_structure_hook_func(matches, structure)
    converter.register_unstructure_hook_func(matches, unstructure)


# -- encode / decode --------------------------------------------------------------------------


def to_wire(value: Any) -> dict[str, Any]:
    """The JSON object of a wire value (camelCase keys, unset optionals omitted)."""
    encoded: dict[str, Any] = converter.unstructure(value, type(value))
    return encoded


def from_wire(cls: type[T], data: object) -> T:
    """Decode *data* (parsed JSON) as *cls*; raises :class:`WireDecodeError` listing each problem.

    Synopsis::

        answer = from_wire(RequestPermissionResponse, await conn.request(...))
    """
    try:
        return converter.structure(data, cls)
    except STRUCTURE_ERRORS as exc:
        errors = problems(exc, extra_keys_hint=_EXTRA_KEYS_HINT)
        raise WireDecodeError(f"malformed {cls.__name__}: {'; '.join(errors)}", errors) from exc


def params_from_wire(cls: type[T], params: object) -> T:
    """:func:`from_wire` for a request handler: a bad value becomes -32602 "invalid params".

    The error's ``data`` is ``{"errors": [...]}``, each entry naming its path (it quotes key
    names and tags, never values). Raise it on from the handler as is.
    """
    try:
        return from_wire(cls, params)
    except WireDecodeError as exc:
        raise JsonRpcError(
            ErrorCode.INVALID_PARAMS,
            f"invalid params: {'; '.join(exc.errors)}",
            {"errors": list(exc.errors)},
        ) from exc
