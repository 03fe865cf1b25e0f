"""The path of one question through the code: which ``broker`` modules it visits, in order.

    python -m bench.path [--store memory|sqlite]

Runs one question (an answerer answers ``allowed-once`` at once) from ``Broker.request`` to its
return, with a profile hook on the trio thread, and prints the sequence of ``broker.*`` modules
whose functions ran (consecutive calls in one module collapsed), how many distinct modules the
question visited, and how many times it came back to a module it had already left. What other
tasks run on the trio thread meanwhile (the store's writer actor, its completion callback) is
counted separately: the question's own path is its task's. Issue 26 asks that both numbers
shrink; the figures before and after the split of ``Session`` are in ``design/architecture.md``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import trio

from broker import AnswerNext, ApprovalRequest, MemoryStore, Outcome, open_broker


def _module_of(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if isinstance(name, str) and (name == "broker" or name.startswith("broker.")):
        return name
    return None


def _current_task() -> trio.lowlevel.Task | None:
    try:
        return trio.lowlevel.current_task()
    except RuntimeError:  # the scheduler itself, between tasks
        return None


async def trace_one(store: str, task_only: bool) -> list[str]:
    """The collapsed module sequence of one question on *store* (warmed up by one before):
    of the asking task alone with *task_only*, else of everything on the trio thread."""

    async def allow(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    sequence: list[str] = []
    asker = trio.lowlevel.current_task()

    def hook(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        if task_only and _current_task() is not asker:
            return
        module = _module_of(frame)
        if module is not None and (not sequence or sequence[-1] != module):
            sequence.append(module)

    with tempfile.TemporaryDirectory() as tmp:
        target = str(Path(tmp) / "log.db") if store == "sqlite" else MemoryStore()
        async with open_broker(store=target) as broker, broker.answerer(allow):
            async with broker.open_session() as session, session.turn():
                req = ApprovalRequest(agent=session.agent, tool_name="bash")
                await broker.request(req)  # warm-up: first-time imports and caches
                sys.setprofile(hook)
                try:
                    outcome = await broker.request(req)
                finally:
                    sys.setprofile(None)
                assert outcome is Outcome.ALLOWED_ONCE
    return sequence


def summarise(sequence: list[str]) -> tuple[int, int]:
    """(distinct modules visited, returns to a module already left)."""
    seen: set[str] = set()
    returns = 0
    for module in sequence:
        if module in seen:
            returns += 1
        seen.add(module)
    return len(seen), returns


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.path", description=__doc__)
    parser.add_argument("--store", choices=("memory", "sqlite"), default="sqlite")
    parser.add_argument("--verbose", action="store_true", help="print the module sequences")
    args = parser.parse_args(argv)
    for task_only, what in ((True, "the asking task"), (False, "the whole trio thread")):
        sequence = trio.run(trace_one, args.store, task_only)
        modules, returns = summarise(sequence)
        if args.verbose:
            sys.stdout.write(" -> ".join(m.removeprefix("broker.") for m in sequence) + "\n")
        sys.stdout.write(
            f"store {args.store}, {what}: {modules} modules visited, "
            f"{returns} returns to a module left before\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
