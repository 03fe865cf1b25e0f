"""The hook bridge as a ``tools/pre-execute`` gate of the tool runtime."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING

import attrs

from ..tools import Allow
from ._bridge import HookBridge, HookCall
from ._settings import claude_code_name

if TYPE_CHECKING:
    from ..tools import CallContext, GateDecision, GateNext, ToolCall

__all__ = ["HookGate"]


@attrs.define(eq=False)
class HookGate:
    """Runs the ``PreToolUse`` hooks matching each call, with the call's session as
    ``session_id`` and *cwd* as the hooks' working directory.

    No matching hook, or hooks with no opinion, delegate to the next gate; an explicit
    ``allow`` claims the decision; ``deny``/``ask`` (and every hook failure, which denies) stop
    the waterfall. An ``ask`` becomes an approval question whose logged reason is the hooks'
    joined reasons. Construction pins hook scripts inside *cwd* (raises
    :class:`HookSettingsError` for one that does not exist).
    """

    bridge: HookBridge
    cwd: pathlib.Path

    def __attrs_post_init__(self) -> None:
        # Load time for this workspace: hook scripts inside it are pinned by content now, so
        # a command that rewrites one gets the hook denied instead of run (HookSettings.pinned).
        self.bridge.settings = self.bridge.settings.pinned(self.cwd)

    async def __call__(self, call: ToolCall, ctx: CallContext, next_: GateNext) -> GateDecision:
        """Evaluate the hooks for *call*. Cancellation: running hooks are killed and reaped."""
        session_id = "" if ctx.agent is None else ctx.agent.session.id
        decision, verdicts = await self.bridge.evaluate_verbose(
            HookCall(
                session_id=session_id,
                cwd=self.cwd,
                # Claude Code's name (Bash): hook scripts written for Claude Code test
                # `.tool_name == "Bash"`, and would wave "bash" through (fail open).
                tool_name=claude_code_name(call.name),
                tool_input=call.arguments,
                tool_use_id=call.id,
            )
        )
        if isinstance(decision, Allow) and all(v.decision is None for v in verdicts):
            return await next_()
        return decision
