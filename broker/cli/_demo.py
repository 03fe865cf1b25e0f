"""``broker demo``: the escalation scenario end to end on the embedded defaults."""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys
import tempfile
from typing import TYPE_CHECKING

import trio

from .. import Answer, Outcome, first_answer, open_broker
from .._events import TurnEnd
from ..agent import AgentLoop, LoopObserver, Scenario, ScriptedModel
from ..scenarios import scenario_path
from ..store import SqliteStore, open_sqlite_reader, show_session
from ..tools import BashTool, BubblewrapExecutor, SandboxUnavailableError, ToolRuntime
from ._signals import run_until_signalled
from ._store_args import sqlite_file
from ._terminal import TerminalAnswerer

if TYPE_CHECKING:
    from .. import AnswerFn, AnswerNext, ApprovalRequest
    from ..tools import ToolCall, ToolResult

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

_ANSWERS = {"allow": Outcome.ALLOWED_ONCE, "reject": Outcome.REJECTED}

DESCRIPTION = """\
The escalation scenario end to end. A scripted model writes a file; the read-only sandbox
(real bubblewrap) denies it; the model retries once asking for workspace-write access with a
justification; you answer the approval prompt; the answer decides whether the file lands.
Then the audit pairs are read back from the session log, which is kept.

examples:
  broker demo                          answer the prompt yourself (a, y: allow; r, n: reject)
  broker demo --answer reject          answer without asking (scripts, CI)
  broker demo --store demo.sqlite      keep the session log where you want it
  broker demo --remote-answers         answer here or from another terminal (broker answer)
"""


def register(sub: _Sub) -> None:
    """Add the ``demo`` sub-command."""
    parser = sub.add_parser(
        "demo",
        help="run the sandbox-escalation scenario end to end and print its audit pairs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--answer",
        choices=sorted(_ANSWERS),
        help="answer the approval prompt without asking (for scripts and CI); "
        "default: ask at the terminal",
    )
    parser.add_argument(
        "--workspace",
        type=pathlib.Path,
        help="directory the agent works in (default: a fresh temporary directory)",
    )
    parser.add_argument(
        "--store",
        type=sqlite_file("the demo reads its log back from a SQLite file"),
        help="SQLite session log to write (a path or sqlite:///PATH); it is kept (default: "
        "sessions.sqlite in a new directory under the system's temporary directory)",
    )
    parser.add_argument(
        "--remote-answers",
        action="store_true",
        help="let the question also be answered from another terminal (broker answer STORE "
        "ID allow|reject); the first answer wins",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status."""
    fixed = None if args.answer is None else _ANSWERS[args.answer]
    store = None if args.store is None else pathlib.Path(args.store)
    if store is None:
        # Kept after the run (unlike the workspace), so the printed `broker log show` works.
        store = pathlib.Path(tempfile.mkdtemp(prefix="broker-demo-")) / "sessions.sqlite"
    with tempfile.TemporaryDirectory(prefix="broker-demo-workspace-") as tmp:
        workspace = pathlib.Path(tmp) / "workspace"
        if args.workspace is not None:
            workspace = args.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        return trio.run(
            run_until_signalled,
            "demo",
            _demo,
            fixed,
            workspace.resolve(),
            store,
            args.remote_answers,
        )


class _Printer(LoopObserver):
    async def on_agent_text(self, text: str) -> None:
        await trio.lowlevel.checkpoint()
        print(f"\nmodel: {text}")

    async def on_tool_call(self, call: ToolCall) -> None:
        await trio.lowlevel.checkpoint()
        print(f"tool call {call.id}: {call.name} {call.arguments}")

    async def on_tool_result(self, call: ToolCall, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        print(f"tool result {call.id}:")
        for line in result.output.splitlines() or [""]:
            print(f"  | {line}")


def _told_where(remote: AnswerFn, store: pathlib.Path) -> AnswerFn:
    """*remote*, after printing how to answer the question from another terminal."""

    async def answer(req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        where = shlex.quote(str(store))
        print(f"  or from another terminal: broker answer {where} {req.question_id} allow|reject")
        return await remote(req, next_)

    return answer


async def _demo(
    fixed: Outcome | None, workspace: pathlib.Path, store: pathlib.Path, remote: bool = False
) -> int:
    try:
        executor = await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        print(f"broker demo: {exc}", file=sys.stderr)
        await trio.lowlevel.checkpoint()
        return 2
    scenario = Scenario.from_file(scenario_path("escalation"))
    print(f"workspace: {workspace}  (sandbox: bubblewrap, default mode read-only)")
    async with open_broker(store=store) as broker, broker.open_session() as session:
        # What the writer's connection reports, read back at open; not what was asked for.
        synchronous = broker.store.synchronous if isinstance(broker.store, SqliteStore) else "?"
        print(f"session log: {store}  (SQLite, synchronous={synchronous}; kept after the demo)")
        bash = BashTool(executor=executor, workspace=workspace)
        runtime = ToolRuntime(tools=[bash], approval=broker)
        loop = AgentLoop(
            broker=broker,
            session=session,
            model=ScriptedModel(scenario),
            runtime=runtime,
            observer=_Printer(),
        )
        answerer: AnswerFn = TerminalAnswerer(fixed)
        if remote:
            answerer = first_answer(answerer, _told_where(broker.remote_answerer(), store))
        async with broker.answerer(answerer):
            prompt = scenario.prompt or "go"
            print(f"\nuser: {prompt}")
            result = await loop.prompt(prompt)
        session_id = session.id
    target = workspace / "escalated.txt"
    timeline = show_session(store, session_id)
    # The log's word for how the turn ended, the one `broker log show` prints.
    ends = [e.event for e in timeline.entries if isinstance(e.event, TurnEnd)]
    ended = ends[-1].reason.kind if ends else "not recorded"
    print(f"\nturn {result.turn} ended: {ended}")
    if target.exists():
        print(f"file on disk: {target.name} = {target.read_text().strip()!r}")
    else:
        print(f"file on disk: {target.name} does not exist")
    print(f"\naudit pairs (read back from {store.name} after the broker closed):")
    with open_sqlite_reader(store) as reader:
        for row in reader.linked_rows(session_id):
            if row.line.startswith('{"type":"approval/'):
                print(f"  {row.line}")
    print(f"\nthe whole session: broker log show {shlex.quote(str(store))} {session_id}")
    return 0
