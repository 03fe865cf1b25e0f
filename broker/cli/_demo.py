"""``broker demo``: one session, a few questions, and the audit pairs read back from the log."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

import trio

from .. import (
    AbortSignal,
    AnswerNext,
    ApprovalRequest,
    MemoryStore,
    Outcome,
    encode_event,
    open_broker,
)

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

_CHOICES = {"allow": Outcome.ALLOWED_ONCE, "reject": Outcome.REJECTED}


def register(sub: _Sub) -> None:
    """Add the ``demo`` sub-command."""
    parser = sub.add_parser(
        "demo",
        help="run a scripted session on the embedded defaults and print its audit pairs",
        description="Run one scripted session: questions answered, withdrawn, and refused by "
        "policy, then print the session log.",
    )
    parser.add_argument(
        "--answer",
        choices=sorted(_CHOICES),
        default="allow",
        help="what the scripted answerer says to the first question (default: allow)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status."""
    return trio.run(_demo, _CHOICES[args.answer])


async def _demo(first_answer: Outcome) -> int:
    store = MemoryStore()
    answers = [first_answer]

    async def scripted(req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        print(f"  answerer: asked about {req.tool_name!r} ({req.display_reason or req.reason})")
        await trio.lowlevel.checkpoint()
        if not answers:
            print("  answerer: no scripted answer; waiting until the question is withdrawn")
            await trio.sleep_forever()
        return answers.pop(0)

    async with open_broker(store=store) as broker:
        async with broker.open_session() as session, broker.answerer(scripted):
            print(f"session {session.id}")
            async with session.turn():
                print("1. a question the answerer decides")
                outcome = await broker.request(
                    ApprovalRequest(
                        agent=session.agent,
                        tool_name="bash",
                        call_id="call_1",
                        reason="write escalated.txt in the workspace",
                    )
                )
                print(f"   -> {outcome}")
                print("2. a question withdrawn by its abort signal")
                signal = AbortSignal()
                async with trio.open_nursery() as nursery:

                    async def ask() -> None:
                        request = ApprovalRequest(
                            agent=session.agent,
                            tool_name="edit",
                            reason="edit notes.md",
                            signal=signal,
                        )
                        print(f"   -> {await broker.request(request)}")

                    nursery.start_soon(ask)
                    await trio.sleep(0.05)
                    signal.abort("the user closed the prompt")
                print("3. the session switches to policy never; the answerer is not consulted")
                await broker.set_policy(session.agent, "never")
                for notice in session.agent.take_notices():
                    print(f"   notice for the model: {notice.text}")
                outcome = await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash", reason="rm -rf build")
                )
                print(f"   -> {outcome}")
            session_id = session.id
    print("\nsession log (approval/* events are the audit pairs):")
    for event in store.read_nowait(session_id):
        print(f"  {encode_event(event)}")
    return 0
