"""``broker demo``: the escalation scenario end to end on the embedded defaults.

The scripted model writes a file; the read-only sandbox (real bubblewrap) denies it; the model
retries once with ``sandbox_permissions: "workspace-write"`` and a justification; a terminal
answerer shows the question; the outcome decides whether the file lands. Then the audit pairs
are read back from the session log.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
from typing import TYPE_CHECKING

import trio

from .. import Outcome, open_broker
from ..agent import AgentLoop, LoopObserver, Scenario, ScriptedModel
from ..scenarios import scenario_path
from ..store import open_sqlite_reader
from ..tools import BashTool, BubblewrapExecutor, SandboxUnavailableError, ToolRuntime
from ._signals import run_until_signalled
from ._terminal import TerminalAnswerer

if TYPE_CHECKING:
    from ..tools import ToolCall, ToolResult

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

_ANSWERS = {"allow": Outcome.ALLOWED_ONCE, "reject": Outcome.REJECTED}


def register(sub: _Sub) -> None:
    """Add the ``demo`` sub-command."""
    parser = sub.add_parser(
        "demo",
        help="run the sandbox-escalation scenario end to end and print its audit pairs",
        description=__doc__,
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
        type=pathlib.Path,
        help="SQLite session log to write (default: a file in a fresh temporary directory)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns the exit status."""
    fixed = None if args.answer is None else _ANSWERS[args.answer]
    with tempfile.TemporaryDirectory(prefix="broker-demo-") as tmp:
        workspace = pathlib.Path(tmp) / "workspace"
        if args.workspace is not None:
            workspace = args.workspace
        workspace.mkdir(parents=True, exist_ok=True)
        store = args.store or pathlib.Path(tmp) / "sessions.sqlite"
        return trio.run(run_until_signalled, "demo", _demo, fixed, workspace.resolve(), store)


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


async def _demo(fixed: Outcome | None, workspace: pathlib.Path, store: pathlib.Path) -> int:
    try:
        executor = await BubblewrapExecutor.probe()
    except SandboxUnavailableError as exc:
        print(f"broker demo: {exc}", file=sys.stderr)
        await trio.lowlevel.checkpoint()
        return 2
    scenario = Scenario.from_file(scenario_path("escalation"))
    print(f"workspace: {workspace}  (sandbox: bubblewrap, default mode read-only)")
    print(f"session log: {store}  (SQLite, synchronous=FULL)")
    async with open_broker(store=store) as broker, broker.open_session() as session:
        bash = BashTool(executor=executor, workspace=workspace)
        runtime = ToolRuntime(tools=[bash], approval=broker)
        loop = AgentLoop(
            broker=broker,
            session=session,
            model=ScriptedModel(scenario),
            runtime=runtime,
            observer=_Printer(),
        )
        async with broker.answerer(TerminalAnswerer(fixed)):
            prompt = scenario.prompt or "go"
            print(f"\nuser: {prompt}")
            result = await loop.prompt(prompt)
        session_id = session.id
    target = workspace / "escalated.txt"
    print(f"\nturn {result.turn} ended: {result.stop_reason}")
    if target.exists():
        print(f"file on disk: {target.name} = {target.read_text().strip()!r}")
    else:
        print(f"file on disk: {target.name} does not exist")
    print(f"\naudit pairs (read back from {store.name} after the broker closed):")
    with open_sqlite_reader(store) as reader:
        for row in reader.rows(session_id):
            if row.line.startswith('{"type":"approval/'):
                print(f"  {row.line}")
    return 0
