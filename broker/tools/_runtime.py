"""The tool runtime: a ``tools/pre-execute`` gate waterfall, ask routing, dispatch (contract §8.1).

Synopsis::

    runtime = ToolRuntime(tools=[bash], gates=[hook_gate], approval=broker)
    result = await runtime.execute(call, agent=session.agent, signal=signal)

A gate is ``async def gate(call, ctx, next) -> Allow | Deny | Ask``: it claims the decision or
delegates with ``return await next()``; the end of the chain allows. An ``Ask`` is resolved
through the approval seam *before* dispatch; only ``allowed-once`` runs the call, exactly once.
The approval service is read from :attr:`ToolRuntime.approval` at each call, so a runtime
composed without one (or after it is gone) fails closed with the spec's texts.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeAlias

import attrs
import trio

from .._agent import Agent
from .._broker import Broker
from .._request import ApprovalRequest
from .._signal import Signal
from .._vocabulary import Outcome
from .._waterfall import run_chain
from ..rules import RuleDecision
from . import _texts
from ._asking import ask_or_refuse
from ._call import CallContext, ToolCall, ToolResult, ToolSpec
from ._gate import Allow, Ask, Deny, GateDecision

__all__ = ["Gate", "GateNext", "Tool", "ToolRuntime"]

log = logging.getLogger("broker.tools")

GateNext: TypeAlias = Callable[[], Awaitable[GateDecision]]
Gate: TypeAlias = Callable[[ToolCall, CallContext, GateNext], Awaitable[GateDecision]]


class Tool(Protocol):
    """A tool the runtime can dispatch."""

    @property
    def name(self) -> str: ...

    def spec(self) -> ToolSpec:
        """How the tool is advertised to the model (may depend on the composition)."""
        ...

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        """Run *call*. Cancellation: the tool stops; whatever it started is cleaned up."""
        ...


@attrs.define(eq=False)
class ToolRuntime:
    """Tools by name, the pre-execute gates in order, and the approval service (or ``None``)."""

    tools: Sequence[Tool] = ()
    gates: Sequence[Gate] = ()
    approval: Broker | None = None
    _by_name: dict[str, Tool] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._by_name = {}
        for tool in self.tools:
            if tool.name in self._by_name:
                raise ValueError(
                    f"tools has two tools named {tool.name!r}: give each tool a unique name"
                )
            self._by_name[tool.name] = tool

    def specs(self) -> list[ToolSpec]:
        """What the model is told about the tools, in registration order."""
        return [tool.spec() for tool in self.tools]

    def tool(self, name: str) -> Tool | None:
        """The tool called *name*, if any."""
        return self._by_name.get(name)

    async def execute(
        self, call: ToolCall, *, agent: Agent | None = None, signal: Signal | None = None
    ) -> ToolResult:
        """Gate, resolve an ask, then run *call*; never raises for a denied or failed call.

        Nor for a question that cannot be put or recorded (no open turn, a closed session, a
        failed audit append): that is an error result whose text starts ``Error: `` and names
        the cause, and the tool does not run. Only the caller's own cancellation propagates:
        a question asked for this call is then withdrawn and audited (``cancelled``) by the
        broker, and the tool, if it was running, stops.
        """
        tool = self._by_name.get(call.name)
        if tool is None:
            await trio.lowlevel.checkpoint()
            known = ", ".join(sorted(self._by_name)) or "none"
            return ToolResult.error(f'unknown tool "{call.name}": available tools are {known}')
        ctx = CallContext(agent=agent, approval=self.approval, signal=signal)
        decision = await self._gate(call, ctx)
        if isinstance(decision, Deny):
            return ToolResult.error(decision.reason)
        if isinstance(decision, Allow) and self._denied_by_rule(call):
            # A deny rule holds for every call, not only those a gate asks about: the question
            # is put so the rule's rejection is audited like any other.
            decision = Ask()
        if isinstance(decision, Ask):
            refusal = await self._resolve_ask(call, ctx, decision)
            if refusal is not None:
                return refusal
        if ctx.aborted:
            return ToolResult.error(_texts.ABORTED_BEFORE_DISPATCH)
        return await tool.run(call, ctx)

    def _denied_by_rule(self, call: ToolCall) -> bool:
        broker = self.approval
        if broker is None or not broker.rules.rules:
            return False
        verdict = broker.rules.decide(call.name, call.arguments)
        return verdict.decision is RuleDecision.DENY

    async def _gate(self, call: ToolCall, ctx: CallContext) -> GateDecision:
        async def ask(gate: Gate, next_: GateNext) -> GateDecision:
            try:
                decision: object = await gate(call, ctx, next_)
            except Exception as exc:
                # Containment: a broken gate fails its call closed, never open.
                log.warning("pre-execute gate %r failed", gate, exc_info=True)
                await trio.lowlevel.checkpoint()
                return Deny(reason=f"pre-execute gate {_name(gate)} failed: {exc}")
            if not isinstance(decision, Allow | Deny | Ask):
                return Deny(
                    reason=f"pre-execute gate {_name(gate)} returned {decision!r}, "
                    "not Allow, Deny or Ask"
                )
            return decision

        # The shared waterfall (broker._waterfall): the end of the chain allows.
        return await run_chain(list(self.gates), ask, Allow)

    async def _resolve_ask(self, call: ToolCall, ctx: CallContext, ask: Ask) -> ToolResult | None:
        """``None`` when the call may run; otherwise the error the model sees."""
        name = call.name
        broker = ctx.approval
        if broker is None:
            await trio.lowlevel.checkpoint()
            return ToolResult.error(ask.reason or _texts.ask_no_service(name))
        if ctx.agent is None:
            await trio.lowlevel.checkpoint()
            return ToolResult.error(_texts.ask_no_agent(name))
        try:
            req = ApprovalRequest(
                agent=ctx.agent,
                tool_name=name,
                call_id=call.id,
                reason=ask.reason,
                signal=ctx.signal,
                arguments=call.arguments,
            )
        except (TypeError, ValueError) as exc:  # arguments JSON cannot hold (NaN): fail closed
            await trio.lowlevel.checkpoint()
            return ToolResult.error(_texts.ask_failed(name, exc))
        decision = await ask_or_refuse(broker, req)
        if isinstance(decision, ToolResult):
            return decision
        outcome = decision.outcome
        if outcome is Outcome.ALLOWED_ONCE:
            if not decision.covers(call.arguments):
                # Bound to the arguments: what runs must be what was decided.
                log.warning(
                    "tool %r call %s: arguments changed after question %s was decided; nothing ran",
                    name,
                    call.id,
                    decision.id,
                )
                return ToolResult.error(_texts.arguments_changed(name))
            return None
        if outcome is Outcome.REJECTED:
            if decision.rule is not None:
                rule = decision.rule
                text = _texts.ask_rejected_by_rule(name, rule.origin.describe(), rule.reason)
            elif decision.by_policy:
                text = _texts.ask_rejected_by_policy(name)
            else:
                text = _texts.ask_rejected(name)
            return ToolResult.error(text)
        if outcome is Outcome.CANCELLED:
            if ctx.aborted:
                return ToolResult.error(_texts.ABORTED_BEFORE_DISPATCH)
            return ToolResult.error(_texts.ask_cancelled(name))
        return ToolResult.error(_texts.ask_unavailable(name))


def _name(gate: object) -> str:
    return getattr(gate, "__qualname__", None) or type(gate).__name__
