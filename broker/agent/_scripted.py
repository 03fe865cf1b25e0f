"""A model that replays a scenario file (JSON or TOML): the demo's and the snapshot tests' model.

Scenario format (JSON shown; TOML has the same shape)::

    {
      "name": "escalation-approved",
      "prompt": "Please write escalated.txt in the workspace.",
      "steps": [
        {"toolCalls": [{"id": "call_1", "name": "bash",
                        "arguments": {"command": "echo escalated > escalated.txt"}}]},
        {"text": "Done."}
      ]
    }

Each model step replays the next step. A step without tool calls ends the turn. When the script
runs out the model answers with no text and no tool calls (the turn ends).

A step may state what the model must have been given before it answers: ``"expect"`` lists
messages (``role`` and any of ``text``, ``callId``, ``source``) that the step's conversation
must hold, in that order (other messages may come between). A step whose expectation fails
raises :class:`ScenarioMismatchError` naming the first missing message: a test that asserts
what the model was given, over any front end.

The model continues where its session's conversation is: at its first step it skips the steps
whose answers the conversation already holds (one per assistant message), so a session loaded
from its log goes on with the script instead of starting over; generated call ids
(``call_<n>``) never repeat one the conversation holds.
"""

from __future__ import annotations

import json
import pathlib
import tomllib
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import trio

from .._cattrs_errors import STRUCTURE_ERRORS, problems
from .._codec import converter, register_wire_type
from .._errors import BrokerError
from ..tools import ToolCall
from ._model import Message, ModelRequest, ModelResponse

__all__ = [
    "ExpectedMessage",
    "Scenario",
    "ScenarioError",
    "ScenarioMismatchError",
    "ScriptedModel",
    "ScriptedStep",
    "ScriptedToolCall",
]


class ScenarioError(BrokerError, ValueError):
    """A scenario file cannot be read or does not have the scenario shape."""


class ScenarioMismatchError(BrokerError, AssertionError):
    """A scripted step's ``expect`` does not hold for the conversation the model was given."""


@attrs.frozen(kw_only=True)
class ExpectedMessage:
    """One message a step expects in its conversation; unset fields match anything."""

    role: Literal["user", "assistant", "tool", "context"]
    text: str | None = None
    call_id: str | None = None
    source: str | None = None

    def matches(self, message: Message) -> bool:
        """Whether *message* is this one (on the fields given)."""
        return (
            message.role == self.role
            and (self.text is None or message.text == self.text)
            and (self.call_id is None or message.call_id == self.call_id)
            and (self.source is None or message.source == self.source)
        )


@attrs.frozen(kw_only=True)
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    id: str | None = None


@attrs.frozen(kw_only=True)
class ScriptedStep:
    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    expect: tuple[ExpectedMessage, ...] = ()


@attrs.frozen(kw_only=True)
class Scenario:
    name: str
    steps: tuple[ScriptedStep, ...]
    prompt: str | None = None

    @classmethod
    def from_file(cls, path: pathlib.Path | str) -> Scenario:
        """Load a ``.json`` or ``.toml`` scenario; :class:`ScenarioError` names the file and why."""
        file = pathlib.Path(path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise ScenarioError(
                f"scenario {str(file)!r} cannot be read: {exc.strerror or exc}; "
                "pass the path of a .json or .toml scenario file"
            ) from exc
        try:
            if file.suffix == ".toml":
                data: object = tomllib.loads(raw.decode("utf-8"))
            else:
                data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ScenarioError(
                f"scenario {str(file)!r} is not valid {file.suffix[1:] or 'json'}: {exc}"
            ) from exc
        return cls.from_data(data, source=str(file))

    @classmethod
    def from_data(cls, data: object, *, source: str = "<scenario>") -> Scenario:
        """Structure already-parsed data; :class:`ScenarioError` names the source and the path."""
        try:
            return converter.structure(data, cls)
        except STRUCTURE_ERRORS as exc:
            detail = "; ".join(problems(exc))
            raise ScenarioError(f"scenario {source!r} is malformed: {detail}") from exc


for _cls in (ExpectedMessage, ScriptedToolCall, ScriptedStep, Scenario):
    register_wire_type(_cls)


@attrs.define(eq=False)
class ScriptedModel:
    """Replays :class:`Scenario` steps; records every request it was given (``requests``)."""

    scenario: Scenario
    requests: list[ModelRequest] = attrs.field(factory=list, init=False)
    _next: int = attrs.field(default=0, init=False)
    _call_counter: int = attrs.field(default=0, init=False)

    @property
    def exhausted(self) -> bool:
        """Whether every scripted step has been replayed."""
        return self._next >= len(self.scenario.steps)

    async def step(self, request: ModelRequest) -> ModelResponse:
        """Replay the next step. Cancellation: a plain checkpoint; the step is not consumed.

        Raises :class:`ScenarioMismatchError` when the step's ``expect`` does not hold.
        """
        await trio.lowlevel.checkpoint()
        if not self.requests:
            # A loaded session: the steps already answered are in the conversation.
            answered = sum(1 for m in request.messages if m.role == "assistant")
            self._next = max(self._next, answered)
        self.requests.append(request)
        if self.exhausted:
            return ModelResponse()
        index = self._next
        step = self.scenario.steps[index]
        self._next += 1
        _check_expectations(self.scenario.name, index, step.expect, request.messages)
        used = {call.id for m in request.messages for call in m.tool_calls}
        calls = []
        for scripted in step.tool_calls:
            call_id = scripted.id
            while call_id is None or (scripted.id is None and call_id in used):
                self._call_counter += 1
                call_id = f"call_{self._call_counter}"
            used.add(call_id)
            calls.append(ToolCall(id=call_id, name=scripted.name, arguments=scripted.arguments))
        return ModelResponse(text=step.text, tool_calls=tuple(calls))


def _check_expectations(
    name: str, index: int, expected: Sequence[ExpectedMessage], given: Sequence[Message]
) -> None:
    position = 0
    for wanted in expected:
        while position < len(given) and not wanted.matches(given[position]):
            position += 1
        if position == len(given):
            raise ScenarioMismatchError(
                f"scenario {name!r} step {index + 1} expected {_describe(wanted)} in the "
                f"conversation it was given ({len(given)} messages), in order: it is missing"
            )
        position += 1


def _describe(wanted: ExpectedMessage) -> str:
    fields = [f"role={wanted.role!r}"]
    for key in ("text", "call_id", "source"):
        value = getattr(wanted, key)
        if value is not None:
            fields.append(f"{key}={_short(value)!r}")
    return "a message with " + ", ".join(fields)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"
