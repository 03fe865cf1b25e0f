"""A terminal answerer: shows the question and the choices, reads the answer (or a fixed one)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import attrs
import trio

from .. import Outcome
from .._display import printable

if TYPE_CHECKING:
    from .. import AnswerNext, ApprovalRequest

__all__ = ["TerminalAnswerer"]

_CHOICES = {
    "a": Outcome.ALLOWED_ONCE,
    "allow": Outcome.ALLOWED_ONCE,
    "r": Outcome.REJECTED,
    "reject": Outcome.REJECTED,
}


@attrs.define(eq=False)
class TerminalAnswerer:
    """Prints the tool, the exact command (from the display reason), the logged reason and the
    choices; answers *fixed* when given (non-interactive), else reads a line from stdin.

    End of input, or anything unreadable, answers ``rejected`` (fail closed).
    """

    fixed: Outcome | None = None

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        """Ask at the terminal. Cancellation: the prompt is abandoned (the question withdrew)."""
        # Everything shown comes from the model or a hook: escaped, so a carriage return,
        # an ANSI sequence or a bidi override cannot rewrite what the person approves.
        call = f"  (call {printable(req.call_id)})" if req.call_id else ""
        print("\n  ┌─ approval needed")
        print(f"  │ tool:    {printable(req.tool_name)}{call}")
        if req.display_reason:
            print(f"  │ asks:    {printable(req.display_reason)}")
        if req.reason:
            print(f"  │ reason:  {printable(req.reason)}")
        print("  │ choices: [a] Allow once   [r] Reject")
        if self.fixed is not None:
            await trio.lowlevel.checkpoint()
            answer = "a" if self.fixed is Outcome.ALLOWED_ONCE else "r"
            print(f"  └─ answer: {answer} (from --answer)")
            return self.fixed
        print("  └─ answer: ", end="", flush=True)
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        outcome = _CHOICES.get(line.strip().lower(), Outcome.REJECTED)
        if line.strip().lower() not in _CHOICES:
            print("     (no recognised answer: rejecting, fail closed)")
        return outcome
