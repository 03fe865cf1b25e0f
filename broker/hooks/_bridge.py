"""Run every matching ``PreToolUse`` hook concurrently and merge their verdicts into one gate.

Precedence is deny > ask > allow (no opinion counts as allow). The winning rank's reasons are
joined with a blank line in configuration order, whatever order the hooks finished in.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping, Sequence

import attrs
import trio

from ..tools import Allow, Ask, Deny, GateDecision
from ._runner import HookVerdict, run_hook
from ._settings import HookSettings

__all__ = ["DEFAULT_DENY_REASON", "HookBridge", "HookCall", "merge_verdicts"]

DEFAULT_DENY_REASON = "blocked by PreToolUse hook"
"""The deny reason when the denying hooks gave none."""


@attrs.frozen(kw_only=True)
class HookCall:
    """The tool call a hook is asked about; becomes the hook's stdin JSON (snake_case keys).

    ``tool_input`` must be JSON-serialisable (it is the model's tool arguments).
    ``transcript_path`` is omitted from the JSON when ``None``.
    """

    session_id: str
    cwd: pathlib.Path
    tool_name: str
    tool_input: Mapping[str, object]
    tool_use_id: str
    transcript_path: str | None = None

    def payload(self) -> dict[str, object]:
        """The public ``PreToolUse`` input object, as Claude Code sends it."""
        out: dict[str, object] = {"session_id": self.session_id}
        if self.transcript_path is not None:
            out["transcript_path"] = self.transcript_path
        out.update(
            cwd=str(self.cwd),
            hook_event_name="PreToolUse",
            tool_name=self.tool_name,
            tool_input=dict(self.tool_input),
            tool_use_id=self.tool_use_id,
        )
        return out


def merge_verdicts(verdicts: Sequence[HookVerdict]) -> GateDecision:
    """One gate decision from per-hook verdicts given in configuration order."""
    for rank in ("deny", "ask"):
        hits = [v for v in verdicts if v.decision == rank]
        if hits:
            joined = "\n\n".join(v.reason for v in hits if v.reason) or None
            if rank == "deny":
                return Deny(reason=joined or DEFAULT_DENY_REASON)
            return Ask(reason=joined)
    return Allow()


@attrs.define(eq=False)
class HookBridge:
    """Answers the pre-execute gate from Claude Code ``PreToolUse`` command hooks."""

    settings: HookSettings

    async def evaluate(self, call: HookCall) -> GateDecision:
        """Run the hooks matching ``call.tool_name`` concurrently; merge them (deny > ask > allow).

        No matching hook is :class:`Allow`. A hook that fails in any way denies (fail closed).

        Cancellation: every running hook's process group is killed and reaped, then
        ``Cancelled`` propagates.
        """
        decision, _ = await self.evaluate_verbose(call)
        return decision

    async def evaluate_verbose(
        self, call: HookCall
    ) -> tuple[GateDecision, tuple[HookVerdict, ...]]:
        """:meth:`evaluate`, plus each hook's verdict in configuration order (for the audit).

        Cancellation: as :meth:`evaluate` — hooks killed and reaped, ``Cancelled`` propagates.
        """
        hooks = self.settings.hooks_for(call.tool_name)
        if not hooks:
            await trio.lowlevel.checkpoint()
            return Allow(), ()
        payload = call.payload()
        verdicts: list[HookVerdict | None] = [None] * len(hooks)

        async def run(index: int) -> None:
            verdicts[index] = await run_hook(hooks[index], payload, cwd=call.cwd)

        async with trio.open_nursery() as nursery:
            for index in range(len(hooks)):
                nursery.start_soon(run, index)
        done = tuple(v for v in verdicts if v is not None)
        assert len(done) == len(hooks)
        return merge_verdicts(done), done
