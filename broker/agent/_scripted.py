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
"""

from __future__ import annotations

import json
import pathlib
import tomllib
from typing import Any

import attrs
import trio

from .._cattrs_errors import STRUCTURE_ERRORS, problems
from .._codec import converter, register_wire_type
from .._errors import BrokerError
from ..tools._call import ToolCall
from ._model import ModelRequest, ModelResponse

__all__ = ["Scenario", "ScenarioError", "ScriptedModel", "ScriptedStep", "ScriptedToolCall"]


class ScenarioError(BrokerError, ValueError):
    """A scenario file cannot be read or does not have the scenario shape."""


@attrs.frozen(kw_only=True)
class ScriptedToolCall:
    name: str
    arguments: dict[str, Any] = attrs.field(factory=dict)
    id: str | None = None


@attrs.frozen(kw_only=True)
class ScriptedStep:
    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()


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


for _cls in (ScriptedToolCall, ScriptedStep, Scenario):
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
        """Replay the next step. Cancellation: a plain checkpoint; the step is not consumed."""
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        if self.exhausted:
            return ModelResponse()
        step = self.scenario.steps[self._next]
        self._next += 1
        calls = []
        for scripted in step.tool_calls:
            self._call_counter += 1
            call_id = scripted.id or f"call_{self._call_counter}"
            calls.append(ToolCall(id=call_id, name=scripted.name, arguments=scripted.arguments))
        return ModelResponse(text=step.text, tool_calls=tuple(calls))
