"""The ``bash`` tool: shell commands in a real sandbox, with a one-shot escalation (contract §8.2).

A write the sandbox refuses comes back with the denial marker and, where a wider mode exists,
the escalation hint. The model may then retry *that* command once with
``sandbox_permissions`` (the wider mode) and a ``justification``; the checks run in the spec's
order, each with its exact text, and only ``allowed-once`` runs the call under the wider mode —
the next call is confined again.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from .._events import SandboxModeSet
from .._request import ApprovalRequest
from .._vocabulary import Outcome
from . import _texts
from ._asking import ask_or_refuse
from ._call import CallContext, ToolCall, ToolResult, ToolSpec
from .sandbox import (
    ESCALATION_HINT,
    BubblewrapExecutor,
    CommandLimits,
    CommandResult,
    PlainExecutor,
    SandboxMode,
    denial_marker,
)

if TYPE_CHECKING:
    from .._agent import AgentSession
    from .._session import Session

__all__ = ["SANDBOX_MODE", "BashTool", "sandbox_context"]

_CONTEXT = {
    SandboxMode.READ_ONLY: (
        'Shell commands run in a "read-only" sandbox without network access: they can read '
        "files but not write them."
    ),
    SandboxMode.WORKSPACE_WRITE: (
        'Shell commands run in a "workspace-write" sandbox without network access: they can '
        "write only inside the workspace."
    ),
    SandboxMode.DANGER_FULL_ACCESS: (
        'Shell commands run with "danger-full-access": there is no sandbox.'
    ),
}


#: The runtime-context key of :func:`sandbox_context`'s text.
SANDBOX_MODE: Final = "sandbox:mode"


def sandbox_context(mode: SandboxMode) -> str:
    """The ``sandbox:mode`` runtime-context contribution for *mode*."""
    return _CONTEXT[mode]


@attrs.define(eq=False)
class BashTool:
    """Runs ``bash -c command`` in *workspace* through *executor*.

    ``default_mode`` applies to a session without a ``sandbox/mode`` override. With a
    :class:`PlainExecutor` (no sandbox in the composition) every command runs
    ``danger-full-access`` and escalation fields are neither advertised nor accepted.
    """

    executor: BubblewrapExecutor | PlainExecutor
    workspace: pathlib.Path
    default_mode: SandboxMode = SandboxMode.READ_ONLY
    limits: CommandLimits = attrs.field(factory=CommandLimits)
    name: str = attrs.field(default="bash", init=False)

    def __attrs_post_init__(self) -> None:
        if not self.confining:
            self.default_mode = SandboxMode.DANGER_FULL_ACCESS

    @property
    def confining(self) -> bool:
        """Whether a sandboxing executor is composed (escalation is possible)."""
        return isinstance(self.executor, BubblewrapExecutor)

    def spec(self) -> ToolSpec:
        """The input schema advertises the escalation fields only when a sandbox is composed."""
        properties: dict[str, Any] = {
            "command": {"type": "string", "description": "the shell command to run (bash -c)"}
        }
        description = "Run a shell command in the workspace."
        if self.confining:
            properties["sandbox_permissions"] = {
                "type": "string",
                "enum": [SandboxMode.WORKSPACE_WRITE.value, SandboxMode.DANGER_FULL_ACCESS.value],
                "description": "retry a sandbox-denied command once under this wider mode "
                "(the narrowest that suffices); the user is asked to approve",
            }
            properties["justification"] = {
                "type": "string",
                "description": "one sentence telling the user why the wider mode is needed",
            }
            description = "Run a shell command in the workspace, inside a sandbox."
        return ToolSpec(
            name=self.name,
            description=description,
            input_schema={
                "type": "object",
                "properties": properties,
                "required": ["command"],
                "additionalProperties": False,
            },
        )

    def mode_for(self, session: AgentSession | None) -> SandboxMode:
        """The session's current mode: its ``sandbox/mode`` override, else the default."""
        if not self.confining:
            return SandboxMode.DANGER_FULL_ACCESS
        override = None if session is None else session.state.sandbox_mode
        return self.default_mode if override is None else SandboxMode(override)

    async def set_mode(self, session: Session, mode: SandboxMode | str) -> None:
        """Override the session's default mode durably (a ``sandbox/mode`` event).

        Cancellation: the event may still land.
        """
        try:
            value = SandboxMode(mode)
        except ValueError:
            modes = ", ".join(m.value for m in SandboxMode)
            raise ValueError(f"mode must be one of {modes}, got {mode!r}") from None
        await session.record(SandboxModeSet(mode=value.value))

    async def run(self, call: ToolCall, ctx: CallContext) -> ToolResult:
        """Check the escalation fields, ask if needed, then run the command.

        Cancellation: an escalation question is withdrawn (audited ``cancelled``); a running
        command is killed with everything it started.
        """
        args = call.arguments
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            await trio.lowlevel.checkpoint()
            return ToolResult.error("invalid input: command must be a non-empty string")
        session = None if ctx.agent is None else ctx.agent.session
        current = self.mode_for(session)
        mode = current
        if "sandbox_permissions" in args or "justification" in args:
            checked = await self._escalate(call, ctx, command, current)
            if isinstance(checked, ToolResult):
                return checked
            mode = checked  # this one call only; nothing is remembered
        result = await self.executor.run(
            command, mode=mode, workspace=self.workspace, limits=self.limits
        )
        return ToolResult(
            output=self._format(result), failed=result.timed_out or result.exit_code != 0
        )

    async def _escalate(
        self, call: ToolCall, ctx: CallContext, command: str, current: SandboxMode
    ) -> SandboxMode | ToolResult:
        """Spec 8.2 checks 1–6, in order; the wider mode when allowed, else the error."""
        args = call.arguments
        permissions = args.get("sandbox_permissions")
        justification = args.get("justification")
        # 1. pairing
        if permissions is not None and justification is None:
            return await _refuse(_texts.ESCALATION_NEEDS_JUSTIFICATION)
        if permissions is None:
            return await _refuse(_texts.ESCALATION_JUSTIFICATION_ALONE)
        if not isinstance(justification, str) or not justification.strip():
            return await _refuse(_texts.ESCALATION_JUSTIFICATION_EMPTY)
        try:
            wider = SandboxMode(permissions)
        except ValueError:
            return await _refuse(
                "invalid escalation: sandbox_permissions must be "
                f'"{SandboxMode.WORKSPACE_WRITE.value}" or '
                f'"{SandboxMode.DANGER_FULL_ACCESS.value}"'
            )
        # 2. a sandbox to escalate
        if not self.confining:
            return await _refuse(_texts.ESCALATION_NO_SANDBOX)
        # 3. strictly wider
        if not wider.is_wider_than(current):
            return await _refuse(_texts.escalation_not_wider(wider.value, current.value))
        # 4. an approval service
        if ctx.approval is None:
            return await _refuse(_texts.escalation_no_service(wider.value))
        # 5. an agent to route through
        if ctx.agent is None:
            return await _refuse(_texts.escalation_no_agent(wider.value))
        # 6. ask
        decision = await ask_or_refuse(
            ctx.approval,
            ApprovalRequest(
                agent=ctx.agent,
                tool_name=call.name,
                call_id=call.id,
                reason=_texts.escalation_reason(wider.value, justification),
                display_reason=f"run `{command}` with {wider.value} access: {justification}",
                signal=ctx.signal,
            ),
        )
        if isinstance(decision, ToolResult):
            return decision
        outcome = decision.outcome
        if outcome is Outcome.ALLOWED_ONCE:
            return wider
        if outcome is Outcome.REJECTED:
            if decision.rule is not None:
                rule = decision.rule
                return ToolResult.error(
                    _texts.escalation_rejected_by_rule(
                        wider.value, rule.origin.describe(), rule.reason
                    )
                )
            if decision.by_policy:
                return ToolResult.error(_texts.escalation_rejected_by_policy(wider.value))
            return ToolResult.error(_texts.escalation_rejected(wider.value))
        if outcome is Outcome.CANCELLED:
            if ctx.aborted:
                return ToolResult.error(_texts.ABORTED_BEFORE_DISPATCH)
            return ToolResult.error(_texts.escalation_cancelled(wider.value))
        return ToolResult.error(_texts.escalation_unavailable(wider.value))

    def _format(self, result: CommandResult) -> str:
        parts = [result.stdout.rstrip("\n")] if result.stdout.strip() else []
        if result.stderr.strip():
            parts.append(result.stderr.rstrip("\n"))
        if result.timed_out:
            parts.append(f"[command timed out after {self.limits.time_limit:g}s and was killed]")
        elif result.exit_code not in (0, None):
            parts.append(f"[exit code {result.exit_code}]")
        if result.output_truncated:
            parts.append(
                f"[output truncated: only the first {self.limits.output_limit} bytes of each "
                "stream were kept]"
            )
        if result.protected_removed:
            parts.append(
                f"[sandbox: removed {', '.join(result.protected_removed)}: protected paths "
                f"cannot be created under {result.mode} mode]"
            )
        if result.write_denied and result.mode is not SandboxMode.DANGER_FULL_ACCESS:
            parts.append(denial_marker(result.mode))
            if self.confining:
                parts.append(ESCALATION_HINT)
        return "\n".join(parts)


async def _refuse(text: str) -> ToolResult:
    await trio.lowlevel.checkpoint()
    return ToolResult.error(text)
