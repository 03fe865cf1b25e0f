"""The one JSON converter: events and wire values to and from their camelCase JSON form.

Invariant: feature code encodes and decodes only through this module. Optional fields are
*omitted* when unset (never ``null``), matching the reference ``session.jsonl`` byte for byte:
compact separators, keys in field order, non-ASCII kept as is.
"""

from __future__ import annotations

import enum
import json
import json.encoder
import re
import types
from collections.abc import Callable
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

import attrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.json import make_converter

from ._cattrs_errors import STRUCTURE_ERRORS, StructureProblem, problems
from ._errors import BrokerError
from ._events import (
    AgentMessage,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    ApprovalRevoke,
    Event,
    SandboxModeSet,
    ToolCalled,
    ToolResulted,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ._json_names import camel, json_type

__all__ = [
    "EventDecodeError",
    "converter",
    "decode_event",
    "encode_event",
    "event_from_dict",
    "event_to_dict",
    "register_event_type",
    "register_wire_type",
    "wire_hooks",
]

T = TypeVar("T")

converter = make_converter(forbid_extra_keys=True)
_EVENT_TYPES: dict[str, type[Event]] = {}


class EventDecodeError(BrokerError, ValueError):
    """A log line or record is not a well-formed event of a known type."""


def _strict(kind: type[Any], *, name: str) -> Any:
    """A structure hook that accepts exactly the JSON type *kind*, never a coercible lookalike.

    cattrs would turn ``"false"`` into ``True`` and ``1`` into ``"1"``; in an audit log that
    could turn a garbled ``remembered`` into a remembered grant.
    """

    def structure(value: object, _type: Any) -> Any:
        if type(value) is kind or (kind is float and type(value) is int):
            return value
        raise StructureProblem(f"expected {name}, got {json_type(value)}")

    return structure


# Registered by class (single dispatch), before any attrs class is registered below, so the
# generated hooks pick them up. StrEnum and IntEnum come before str and int in their members'
# MRO, so enums keep cattrs' value validation — on a value of the right JSON type only.
for _kind, _name in (
    (str, "a string"),
    (int, "an integer"),
    (bool, "a boolean"),
    (float, "a number"),
):
    converter.register_structure_hook(_kind, _strict(_kind, name=_name))


def _enum_hook(kind: type[Any], name: str) -> Any:
    check = _strict(kind, name=name)

    def structure(value: object, type_: Any) -> Any:
        return type_(check(value, kind))

    return structure


converter.register_structure_hook(enum.StrEnum, _enum_hook(str, "a string"))
converter.register_structure_hook(enum.IntEnum, _enum_hook(int, "an integer"))


def wire_hooks(cls: type[Any]) -> tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]:
    """The unstructure and structure hooks of an attrs class in its wire form, not registered.

    Wire names are camelCase, unset fields are omitted, unknown keys are refused. The field
    hooks are looked up now: register those of the fields' types first.
    """
    fields = attrs.fields(cls)
    overrides: dict[str, Any] = {
        f.name: override(rename=camel(f.name), omit_if_default=True) for f in fields
    }
    return (
        make_dict_unstructure_fn(cls, converter, **overrides),
        make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True, **overrides),
    )


def register_wire_type(cls: type[Any]) -> None:
    """Register an attrs class whose wire names are camelCase and whose unset fields are omitted."""
    unstructure, structure = wire_hooks(cls)
    converter.register_unstructure_hook(cls, unstructure)
    converter.register_structure_hook(cls, structure)


def register_event_type(cls: type[Event]) -> None:
    """Make *cls* encodable and decodable under its ``TYPE`` tag."""
    if not cls.TYPE:
        raise ValueError(f"event class {cls.__name__} has an empty TYPE: set the wire tag")
    existing = _EVENT_TYPES.get(cls.TYPE)
    if existing is not None and existing is not cls:
        raise ValueError(f"event type {cls.TYPE!r} is already registered by {existing.__name__}")
    register_wire_type(cls)
    _EVENT_TYPES[cls.TYPE] = cls
    fast = _compile_line_encoder(cls)
    if fast is None:
        _FAST_LINES.pop(cls, None)
    else:
        _FAST_LINES[cls] = fast


# The hot encode path (every durable append): for an event class whose fields are all strings,
# integers, booleans or string enums (optional or not), a line is assembled directly with the
# C string escaper json.dumps itself uses — byte-identical to the converter's line (a property
# test compares them), several times faster. A value of any other type at run time falls back
# to the converter, so the fast path can only ever be a shortcut.
_FAST_LINES: dict[type[Event], Callable[[Event], str | None]] = {}
_escape = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) uses


def _field_kind(tp: object) -> type[Any] | None:
    """str, int, bool or enum.StrEnum for a supported (optional) field type, else None."""
    options = [tp]
    if isinstance(tp, types.UnionType) or get_origin(tp) is Union:
        options = [arg for arg in get_args(tp) if arg is not type(None)]
    if len(options) != 1:
        return None
    [kind] = options
    if kind in (str, int, bool):
        return cast(type[Any], kind)
    if isinstance(kind, type) and issubclass(kind, enum.StrEnum):
        return enum.StrEnum
    return None


def _enum_of(tp: object) -> type[enum.StrEnum]:
    """The StrEnum class of a field :func:`_field_kind` found to hold one (optional or not)."""
    options = get_args(tp) if isinstance(tp, types.UnionType) or get_origin(tp) is Union else ()
    [kind] = [arg for arg in options if arg is not type(None)] or [tp]
    assert isinstance(kind, type)
    assert issubclass(kind, enum.StrEnum)
    return kind


def _compile_line_encoder(cls: type[Event]) -> Callable[[Event], str | None] | None:
    """Generate the fast encoder of *cls* (as attrs generates ``__init__``): one straight-line
    function per class, each field's check and text unrolled, no per-field loop."""
    hints = get_type_hints(cls)
    namespace: dict[str, Any] = {"_escape": _escape}
    lines = ["def encode(event):", "    parts = []"]
    for index, field in enumerate(attrs.fields(cls)):
        kind = _field_kind(hints.get(field.name))
        if kind is None or isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
            return None
        key = f'"{camel(field.name)}":'
        value = f"v{index}"
        lines.append(f"    {value} = event.{field.name}")
        indent = "    "
        if field.default is not attrs.NOTHING:
            # Omitted when unset, as the converter's omit_if_default (==). For a None, True or
            # False default `is` decides the same for every value of the right type; any other
            # value is not of the right type and falls back to the converter just below.
            namespace[f"d{index}"] = field.default
            same = "is" if field.default is None or isinstance(field.default, bool) else "=="
            lines.append(f"    if not ({value} {same} d{index}):")
            indent = "        "
        if kind is enum.StrEnum:
            # A StrEnum member is the str of its value: escaped as is (no Enum.value lookup).
            # A member of exactly the annotated enum (a type test, not isinstance through the
            # enum's metaclass); any other value is the converter's.
            namespace[f"e{index}"] = _enum_of(hints[field.name])
            lines.append(f"{indent}if type({value}) is not e{index}:")
            lines.append(f"{indent}    return None")
            lines.append(f"{indent}parts.append({key!r} + _escape({value}))")
        else:
            # Not what the annotation says: let the converter decide.
            lines.append(f"{indent}if type({value}) is not {kind.__name__}:")
            lines.append(f"{indent}    return None")
            if kind is str:
                text = f"_escape({value})"
            elif kind is bool:
                text = f'("true" if {value} else "false")'
            else:
                text = f"int.__repr__({value})"
            lines.append(f"{indent}parts.append({key!r} + {text})")
    head = f'{{"type":{_escape(cls.TYPE)},"data":{{'
    lines.append(f'    return {head!r} + ",".join(parts) + "}}}}"')
    exec(compile("\n".join(lines), f"<line encoder of {cls.__name__}>", "exec"), namespace)
    encode: Callable[[Event], str | None] = namespace["encode"]
    return encode


for _cls in (
    TurnStart,
    TurnEnd,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalPolicy,
    ApprovalGrant,
    ApprovalRevoke,
    UserMessage,
    AgentMessage,
    ToolCalled,
    ToolResulted,
    SandboxModeSet,
):
    register_event_type(_cls)
register_wire_type(TurnEndReason)


def event_to_dict(event: Event) -> dict[str, Any]:
    """The ``{"type": ..., "data": {...}}`` form of *event*."""
    return {"type": event.TYPE, "data": converter.unstructure(event, type(event))}


def encode_event(event: Event) -> str:
    """One compact JSON line (no trailing newline), byte-compatible with the reference log."""
    fast = _FAST_LINES.get(type(event))
    if fast is not None:
        line = fast(event)
        if line is not None:
            return line if line.isascii() else utf8_safe(line)
    return encode_event_generic(event)


def encode_event_generic(event: Event) -> str:
    """:func:`encode_event` through the converter alone (the reference for the fast path)."""
    return utf8_safe(json.dumps(event_to_dict(event), separators=(",", ":"), ensure_ascii=False))


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_encodable(text: str) -> bool:
    """Whether *text* encodes as UTF-8: it holds no lone surrogate (``json.loads`` makes one of
    ``"\\ud800"``). The usual, ASCII case is one flag test."""
    return text.isascii() or _LONE_SURROGATE.search(text) is None


def utf8_safe(text: str) -> str:
    """JSON *text* with every lone surrogate written as its ``\\uXXXX`` escape, so that it
    encodes as UTF-8 and decodes to the same string.

    ``json.loads`` turns ``"\\ud800"`` into a str no codec can write: such a reason or tool
    name (a client's or a model's) failed its store's write and left the store broken for every
    later question. Outside its strings JSON is ASCII, so only string contents are touched;
    text without a surrogate is returned as it is (the usual, ASCII case is one flag test)."""
    if utf8_encodable(text):
        return text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def event_from_dict(record: object) -> Event:
    """Decode a ``{"type", "data"}`` mapping; raises :class:`EventDecodeError` with the cause."""
    if not isinstance(record, dict):
        raise EventDecodeError(f"event must be a JSON object, got {type(record).__name__}")
    extra = set(record) - {"type", "data"}
    if extra:
        raise EventDecodeError(f"event has unexpected keys {sorted(extra)}: expected type and data")
    tag = record.get("type")
    cls = _EVENT_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        known = ", ".join(sorted(_EVENT_TYPES))
        raise EventDecodeError(f"unknown event type {tag!r}: expected one of {known}")
    data = record.get("data")
    if not isinstance(data, dict):
        raise EventDecodeError(f"event {tag!r} has no data object")
    try:
        return converter.structure(data, cls)
    except STRUCTURE_ERRORS as exc:
        detail = "; ".join(problems(exc))
        raise EventDecodeError(f"malformed {tag!r} event: {detail}") from exc


def decode_event(line: str | bytes) -> Event:
    """Decode one JSON line produced by :func:`encode_event`."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EventDecodeError(f"not valid JSON: {exc.msg} at column {exc.colno}") from exc
    return event_from_dict(record)
