"""A terminal answerer: shows the question and the choices, reads the answer (or a fixed one)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, ClassVar, TextIO

import attrs
import trio

from .. import Outcome
from .._display import printable
from .._grants import always_offer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .. import AnswerNext, ApprovalRequest

__all__ = ["MAX_TRIES", "TerminalAnswerer"]

_CHOICES = {
    "a": Outcome.ALLOWED_ONCE,
    "allow": Outcome.ALLOWED_ONCE,
    "y": Outcome.ALLOWED_ONCE,
    "yes": Outcome.ALLOWED_ONCE,
    "r": Outcome.REJECTED,
    "reject": Outcome.REJECTED,
    "n": Outcome.REJECTED,
    "no": Outcome.REJECTED,
}
#: Unrecognised answers tolerated before the question is rejected (a script feeding garbage).
MAX_TRIES = 5


@attrs.define(eq=False)
class TerminalAnswerer:
    """Prints the tool, what is asked (the display reason, else the logged reason) and the
    choices; answers *fixed* when given (non-interactive), else reads lines from *stdin*
    (default: ``sys.stdin`` at the time of asking).

    ``a``/``allow``/``y``/``yes`` allow once; ``r``/``reject``/``n``/``no`` reject; an empty
    line takes the default shown, ``r``. Anything else asks again, up to :data:`MAX_TRIES`
    times. End of input, or too many unrecognised answers, rejects (fail closed).

    With *remember* (``broker.remember`` for the asking session), a question that has a rule
    to remember also offers ``s``/``always``: the rule is shown in the choice (``Always allow
    bash: npm run (this session)``), remembered, and the call allowed once. With
    *remember_in_project* (``broker.remember(..., scope="project")``) and the file it writes,
    *project_rules*, such a question also offers ``p``/``project``: the same rule, written to
    the project's rules file (``Always allow bash: npm run (project rules FILE)``).
    """

    fixed: Outcome | None = None
    stdin: TextIO | None = None
    remember: Callable[[ApprovalRequest], Awaitable[object]] | None = None
    remember_in_project: Callable[[ApprovalRequest], Awaitable[object]] | None = None
    project_rules: str | None = None

    #: What the log calls it (``answerer`` of ``approval/decided``).
    answerer_name: ClassVar[str] = "terminal"

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        """Ask at the terminal. Cancellation: the prompt is abandoned (the question withdrew)."""
        # Everything shown comes from the model or a hook: escaped, so a carriage return,
        # an ANSI sequence or a bidi override cannot rewrite what the person approves.
        call = f"  (call {printable(req.call_id)})" if req.call_id else ""
        print("\n  ┌─ approval needed")
        print(f"  │ tool:    {printable(req.tool_name)}{call}")
        # The display reason restates the logged one for people (it names the command too):
        # show one of them, so the justification appears once.
        if req.display_reason:
            print(f"  │ asks:    {printable(req.display_reason)}")
        elif req.reason:
            print(f"  │ reason:  {printable(req.reason)}")
        offer = always_offer(req) if self.remember is not None else None
        always = f"   [s] Always allow {printable(offer)} (this session)" if offer else ""
        in_project = offer if self.remember_in_project is not None and self.project_rules else None
        if in_project:
            always += (
                f"   [p] Always allow {printable(in_project)} (project rules "
                f"{printable(self.project_rules or '')})"
            )
        print(f"  │ choices: [a] Allow once   [r] Reject{always}   (default: r)")
        if self.fixed is not None:
            await trio.lowlevel.checkpoint()
            answer = "a" if self.fixed is Outcome.ALLOWED_ONCE else "r"
            print(f"  └─ answer: {answer} (from --answer)")
            return self.fixed
        stdin = self.stdin if self.stdin is not None else sys.stdin
        prompt = "  └─ answer [a/r]: "
        for _ in range(MAX_TRIES):
            print(prompt, end="", flush=True)
            line = await trio.to_thread.run_sync(stdin.readline, abandon_on_cancel=True)
            if not line:
                print("\n     (end of input: rejecting, fail closed)")
                return Outcome.REJECTED
            word = line.strip().lower()
            if not word:
                print("     (no answer: rejecting, the default)")
                return Outcome.REJECTED
            if word in _CHOICES:
                return _CHOICES[word]
            if offer and word in ("s", "always") and self.remember is not None:
                await self.remember(req)
                return Outcome.ALLOWED_ONCE
            if in_project and word in ("p", "project") and self.remember_in_project is not None:
                await self.remember_in_project(req)
                return Outcome.ALLOWED_ONCE
            print(
                f"     {word[:40]!r} is not an answer: "
                "type a (or y) to allow once, r (or n) to reject"
            )
            prompt = "     answer [a/r]: "
        print(f"     (no recognised answer after {MAX_TRIES} tries: rejecting, fail closed)")
        return Outcome.REJECTED  # noqa: ASYNC910 (each try awaited a thread; MAX_TRIES >= 1)
