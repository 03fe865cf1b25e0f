"""ACP permission round trips over a real stdio pipe, and what the ACP layer adds to an ask.

    python -m bench.acp [--quick]

1. **Over stdio.** ``broker acp`` runs as a child process (``--sandbox none``, in-memory store)
   with a scenario of N ``bash`` calls (``true``), each behind a ``PreToolUse`` hook; this
   process is the client and answers every ``session/request_permission`` with ``allow-once``
   at once. Runs of two kinds alternate: the hook *asks* (N permission round trips over the
   pipe), and the hook *allows* (no question; otherwise the same work: one hook process and one
   command per call). Per call is the time between consecutive ``tool_call`` updates; the
   difference of the p50s is what an ask over ACP stdio adds to a call, and calls over the
   asking runs' prompt time is the end-to-end rate of permission round trips (hook included).
2. **In-process.** The same question (``broker.request()`` with a call id, asked+decided
   appended to a :class:`MemoryStore`) answered by an in-process answerer that answers at once,
   vs by the :class:`AcpAnswerer` whose client answers at once: a ``JsonRpcConnection`` over a
   ``memory_stream_pair``, one over an ``os.pipe`` pair, and a separate client process over its
   stdin/stdout. Interleaved blocks in one run; the ratios are to the in-process answerer.

``measure(quick)`` is the suite's entry (``bench/__main__.py`` lists the benches it runs).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from bench._stats import summary_us
from bench._suite import Figure, Result
from broker import AnswerNext, ApprovalRequest, Broker, MemoryStore, Outcome, open_broker
from broker.acp import JsonRpcConnection
from broker.acp._answerer import AcpAnswerer

ALLOW_ONCE = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}


# -- 1. over a real stdio pipe -----------------------------------------------------------------


def _hook_settings(decision: str) -> dict[str, Any]:
    verdict = json.dumps(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                "permissionDecisionReason": f"the bench hook says {decision}",
            }
        }
    )
    command = f"cat >/dev/null; printf '%s\\n' '{verdict}'"
    hook = {"type": "command", "command": command, "timeout": 30}
    return {"hooks": {"PreToolUse": [{"matcher": "bash", "hooks": [hook]}]}}


def _scenario(calls: int) -> dict[str, Any]:
    tool_calls = [
        {"id": f"call_{i}", "name": "bash", "arguments": {"command": "true"}}
        for i in range(1, calls + 1)
    ]
    return {"name": "bench-asks", "steps": [{"toolCalls": tool_calls}, {"text": "Done."}]}


class _Client:
    """Newline-delimited JSON-RPC over the child's pipes; answers every permission at once."""

    def __init__(self, stdin: trio.abc.SendStream, stdout: trio.abc.ReceiveStream) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.buffer = b""
        self.next_id = 0
        self.permissions = 0
        #: perf_counter_ns() at each ``tool_call`` update: consecutive ones bound one call.
        self.tool_calls: list[int] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stdout.receive_some(65536)
            if not chunk:
                raise RuntimeError("broker acp closed its stdout")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        request_id = self.next_id
        self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            frame = await self.receive()
            if frame.get("method") == "session/update":
                if frame["params"]["update"]["sessionUpdate"] == "tool_call":
                    self.tool_calls.append(time.perf_counter_ns())
            elif frame.get("method") == "session/request_permission":
                self.permissions += 1
                await self.send({"jsonrpc": "2.0", "id": frame["id"], "result": ALLOW_ONCE})
            elif "method" not in frame and frame.get("id") == request_id:
                if "error" in frame:
                    raise RuntimeError(f"{method} failed: {frame['error']}")
                return frame["result"]


@attrs.frozen(kw_only=True)
class StdioRun:
    seconds: float  # the whole prompt
    asked: int  # permission requests the client answered
    per_call_ns: list[int]  # from one call's tool_call update to the next's


async def stdio_run(workdir: pathlib.Path, decision: str, calls: int) -> StdioRun:
    """One ``broker acp`` prompt of *calls* calls behind a hook that says *decision*."""
    settings = workdir / f"hooks-{decision}.json"
    settings.write_text(json.dumps(_hook_settings(decision)))
    scenario = workdir / f"scenario-{calls}.json"
    scenario.write_text(json.dumps(_scenario(calls)))
    workspace = workdir / "ws"
    workspace.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "broker.cli", "acp", "--sandbox", "none"]
    command += ["--store", ":memory:", "--scenario", str(scenario), "--hooks", str(settings)]
    process = await trio.lowlevel.open_process(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        client = _Client(process.stdin, process.stdout)
        await client.call("initialize", {"protocolVersion": 1})
        new = await client.call("session/new", {"cwd": str(workspace), "mcpServers": []})
        prompt = {"sessionId": new["sessionId"], "prompt": [{"type": "text", "text": "go"}]}
        start = time.perf_counter()
        result = await client.call("session/prompt", prompt)
        elapsed = time.perf_counter() - start
        marks = client.tool_calls
        assert result["stopReason"] == "end_turn", result
        await process.stdin.aclose()
        with trio.fail_after(30):
            status = await process.wait()
        assert status == 0, f"broker acp exited {status}"
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            await trio.aclose_forcefully(process.stdout)
    per_call = [b - a for a, b in itertools.pairwise(marks)]
    return StdioRun(seconds=elapsed, asked=client.permissions, per_call_ns=per_call)


# -- 2. in-process: the same question, answered without and with ACP --------------------------


async def answer_at_once(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


async def _allow(_params: dict[str, Any]) -> Any:
    await trio.lowlevel.checkpoint()
    return ALLOW_ONCE


Streams = tuple[
    trio.abc.SendStream, trio.abc.ReceiveStream, trio.abc.SendStream, trio.abc.ReceiveStream
]


def _memory_streams() -> Streams:
    agent_side, client_side = trio.testing.memory_stream_pair()
    return agent_side, agent_side, client_side, client_side


def _pipe_streams() -> Streams:
    to_client_r, to_client_w = os.pipe()
    to_agent_r, to_agent_w = os.pipe()
    fd = trio.lowlevel.FdStream
    return fd(to_client_w), fd(to_agent_r), fd(to_agent_w), fd(to_client_r)


# A client in its own process: answers each permission request with allow-once at once.
CLIENT_PROCESS = """
import json, sys
allow = {"outcome": {"outcome": "selected", "optionId": "allow-once"}}
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "session/request_permission":
        reply = {"jsonrpc": "2.0", "id": message["id"], "result": allow}
        sys.stdout.write(json.dumps(reply) + "\\n")
        sys.stdout.flush()
"""


def _answerer(broker: Broker, session: Any, connection: JsonRpcConnection) -> AcpAnswerer:
    return AcpAnswerer(
        connection=connection,
        acp_session_id=session.id,
        agent=session.agent,
        broker=broker,
        deadline=30.0,
    )


@asynccontextmanager
async def acp_answerer(
    broker: Broker, session: Any, streams: Streams
) -> AsyncIterator[AcpAnswerer]:
    """An :class:`AcpAnswerer` whose client, on the other end of *streams*, allows at once."""
    agent_send, agent_receive, client_send, client_receive = streams
    agent = JsonRpcConnection(send_stream=agent_send, receive_stream=agent_receive)
    client = JsonRpcConnection(send_stream=client_send, receive_stream=client_receive)
    client.on_request("session/request_permission", _allow)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.serve)
        await nursery.start(client.serve)
        yield _answerer(broker, session, agent)
        await client.aclose()
        await agent.aclose()


@asynccontextmanager
async def acp_answerer_to_process(broker: Broker, session: Any) -> AsyncIterator[AcpAnswerer]:
    """An :class:`AcpAnswerer` whose client is another process, over its stdin/stdout pipes."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", CLIENT_PROCESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert process.stdin is not None
    assert process.stdout is not None
    agent = JsonRpcConnection(send_stream=process.stdin, receive_stream=process.stdout)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(agent.serve)
            yield _answerer(broker, session, agent)
            await agent.aclose()  # closes the child's stdin: it ends
        with trio.fail_after(10):
            await process.wait()
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _timed(rounds: int, fn: Callable[[], Awaitable[Outcome]], out: list[int]) -> None:
    for _ in range(rounds):
        start = time.perf_counter_ns()
        outcome = await fn()
        out.append(time.perf_counter_ns() - start)
        assert outcome is Outcome.ALLOWED_ONCE


SERIES = {
    "in-process": "in-process answerer",
    "acp-memory": "AcpAnswerer, memory streams",
    "acp-pipe": "AcpAnswerer, os.pipe, same process",
    "acp-process": "AcpAnswerer, client process (stdio)",
}


async def in_process(rounds: int, blocks: int = 10) -> dict[str, dict[str, float]]:
    series: dict[str, list[int]] = {name: [] for name in SERIES}
    async with open_broker(store=MemoryStore()) as broker, broker.open_session() as session:
        question = ApprovalRequest(agent=session.agent, tool_name="bash", call_id="call_1")
        async with (
            acp_answerer(broker, session, _memory_streams()) as over_memory,
            acp_answerer(broker, session, _pipe_streams()) as over_pipe,
            acp_answerer_to_process(broker, session) as over_stdio,
            session.turn(),
        ):
            answerers: dict[str, Any] = {
                "in-process": answer_at_once,
                "acp-memory": over_memory,
                "acp-pipe": over_pipe,
                "acp-process": over_stdio,
            }
            per_block = max(1, rounds // blocks)
            for block in range(blocks + 1):  # block 0 warms up, unmeasured
                for name, answerer in answerers.items():
                    async with broker.answerer(answerer):
                        out = series[name] if block else []
                        await _timed(per_block, lambda: broker.request(question), out)
    return {name: summary_us(values) for name, values in series.items()}


# -- the suite entry and the table ------------------------------------------------------------


def _pool(runs: list[StdioRun]) -> StdioRun:
    return StdioRun(
        seconds=sum(r.seconds for r in runs),
        asked=sum(r.asked for r in runs),
        per_call_ns=[ns for r in runs for ns in r.per_call_ns],
    )


@attrs.frozen(kw_only=True)
class Measured:
    calls: int  # per stdio run
    repeats: int  # stdio runs of each kind
    allow: StdioRun  # the hook allows: no question
    ask: StdioRun  # the hook asks; the client allows at once
    rounds: int
    latency: dict[str, dict[str, float]]

    def per_call_us(self, run: StdioRun) -> dict[str, float]:
        return summary_us(run.per_call_ns)

    @property
    def ask_cost_us(self) -> float:
        """What one ask over ACP stdio adds to a hooked call (difference of the p50s)."""
        return self.per_call_us(self.ask)["p50"] - self.per_call_us(self.allow)["p50"]


async def measure_async(calls: int, repeats: int, rounds: int) -> Measured:
    with tempfile.TemporaryDirectory(prefix="bench-acp-") as tmp:
        workdir = pathlib.Path(tmp)
        await stdio_run(workdir, "ask", min(calls, 20))  # warm-up: imports, page cache
        # Alternating runs, pooled, so that drift on a shared machine hits both alike.
        runs: dict[str, list[StdioRun]] = {"allow": [], "ask": []}
        for _ in range(repeats):
            for decision, done in runs.items():
                done.append(await stdio_run(workdir, decision, calls))
    allow, ask = _pool(runs["allow"]), _pool(runs["ask"])
    assert allow.asked == 0, allow.asked
    assert ask.asked == calls * repeats, (ask.asked, calls)
    latency = await in_process(rounds)
    return Measured(
        calls=calls, repeats=repeats, allow=allow, ask=ask, rounds=rounds, latency=latency
    )


def to_result(m: Measured) -> Result:
    base = m.latency["in-process"]["p50"]
    return Result(
        name="acp",
        figures=(
            Figure(
                label="stdio: a hooked call that asks (the client allows), p50",
                value=m.per_call_us(m.ask)["p50"],
                unit="µs",
                baseline=m.per_call_us(m.allow)["p50"],
                baseline_label="stdio: a hooked call the hook allows (no ask), p50",
            ),
            Figure(
                label="stdio: permission round trips per second, end to end",
                value=m.calls * m.repeats / m.ask.seconds,
                unit="/s",
            ),
            *(
                Figure(
                    label=f"ask via AcpAnswerer {how}, p50",
                    value=m.latency[key]["p50"],
                    unit="µs",
                    baseline=base,
                    baseline_label="in-process answerer, p50",
                )
                for key, how in (
                    ("acp-memory", "over memory streams"),
                    ("acp-pipe", "over os.pipe"),
                    ("acp-process", "to a client process over stdio"),
                )
            ),
        ),
        notes=(
            f"stdio p50 difference per hooked call: {m.ask_cost_us:.0f} µs (noisy: the hook and"
            " command processes dominate)",
        ),
    )


def _sizes(quick: bool) -> tuple[int, int, int]:
    """(hooked calls per stdio run, stdio runs of each kind, asks per in-process series)."""
    return (50, 4, 2_000) if quick else (200, 10, 20_000)


def measure(quick: bool) -> Result:
    """The suite's entry."""
    return to_result(trio.run(measure_async, *_sizes(quick)))


def print_table(m: Measured) -> None:
    print(
        f"ACP over a real stdio pipe: broker acp --sandbox none, :memory: store, "
        f"{m.repeats} x {m.calls} hooked calls of each kind, alternating"
    )
    print(f"{'per hooked call':34}{'p50 µs':>10}{'p90 µs':>10}{'p99 µs':>10}{'calls/s':>10}")
    for label, run in (
        ("hook allows (no ask)", m.allow),
        ("hook asks, client allows at once", m.ask),
    ):
        s = m.per_call_us(run)
        rate = m.calls * m.repeats / run.seconds
        print(f"{label:34}{s['p50']:10.0f}{s['p90']:10.0f}{s['p99']:10.0f}{rate:10.1f}")
    rate = m.calls * m.repeats / m.ask.seconds
    print(
        f"{rate:.0f} permission round trips/s end to end (a hook process per call included); "
        f"p50 difference {m.ask_cost_us:.0f} µs per call, within the noise of the hook and "
        "command processes: the client-process row below isolates the ACP cost"
    )
    print()
    print(f"ask latency in-process, broker.request() answered at once, {m.rounds} asks each")
    base = m.latency["in-process"]["p50"]
    print(f"{'':38}{'p50 µs':>10}{'p90 µs':>10}{'p99 µs':>10}{'p50 ratio':>11}")
    for name, label in SERIES.items():
        s = m.latency[name]
        ratio = s["p50"] / base
        print(f"{label:38}{s['p50']:10.1f}{s['p90']:10.1f}{s['p99']:10.1f}{ratio:10.2f}x")
    added = m.latency["acp-process"]["p50"] - base
    print(f"the ACP layer to a client process adds {added:.0f} µs (p50) to an ask")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run for CI (< 20 s)")
    args = parser.parse_args()
    print_table(trio.run(measure_async, *_sizes(args.quick)))
    sys.exit(0)
