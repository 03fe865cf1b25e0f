"""Rules: deciding against 1 000 rules, and what loaded rules cost an ask they do not decide.

    python -m bench.rules [--quick]

1. ``RuleSet.decide`` for 5-part compound commands (``a && b | c; d || e``, each part covered
   by one of 1 000 loaded rules, a different command every time) — target p50 <= 20 µs; the
   parse of the same commands alone is shown beside it.
2. ``broker.request()`` (in-memory store, an answerer that answers at once) for a command no
   rule decides, with the same 1 000 rules loaded, against the same ask on a broker with no
   rules — target p50 <= 1.2x for the same command asked again (the engine keeps recently
   parsed lines); shown beside it, with no target, a different command every time (nothing
   cached). Both brokers are measured in the same run, in alternating blocks, so drift hits
   both alike.
"""

from __future__ import annotations

import sys
import time
from functools import partial

import trio

from bench._stats import summary_us
from bench._suite import Figure, Result, standalone
from broker import AnswerNext, ApprovalRequest, MemoryStore, Outcome, open_broker
from broker.rules import Layer, Rule, RuleDecision, RuleOrigin, RuleSet
from broker.rules._shell import parse_command

RULES = 1000


def thousand_rules() -> RuleSet:
    """1 000 rules on ``bash``: allow ``toolN run`` (every tenth a deny of ``toolN rm``), plus
    rules on MCP tool names and on path arguments, as a large project file would have."""
    rules: list[Rule] = []
    for n in range(RULES):
        origin = RuleOrigin(layer=Layer.PROJECT, file="bench.toml", index=n + 1)
        if n % 10 == 0:
            rule = Rule.build(
                decision=RuleDecision.DENY,
                tools=("bash",),
                command=(f"tool{n}", "rm"),
                origin=origin,
            )
        elif n % 10 == 1:
            rule = Rule.build(decision=RuleDecision.DENY, tools=(f"mcp__srv{n}__*",), origin=origin)
        elif n % 10 == 2:
            rule = Rule.build(
                decision=RuleDecision.ALLOW,
                tools=("read_*",),
                args={"path": f"/data/{n}/**"},
                origin=origin,
            )
        else:
            rule = Rule.build(
                decision=RuleDecision.ALLOW,
                tools=("bash",),
                command=(f"tool{n}", "run"),
                origin=origin,
            )
        rules.append(rule)
    return RuleSet(rules)


def compound(i: int) -> str:
    """The *i*-th of the measured commands: five parts, each covered by an allow rule, and
    every command different (``-j{i}``), so none is found among recently parsed lines."""
    n = [3 + (i * 7 + k * 10) % 990 // 10 * 10 for k in range(5)]
    return (
        f"tool{n[0]} run a -j{i} && tool{n[1]} run b -x | tool{n[2]} run --y=z; "
        f"tool{n[3]} run q || tool{n[4]} run ./w"
    )


def measure_decide(rounds: int) -> tuple[Figure, Figure]:
    rules = thousand_rules()
    commands = [compound(i) for i in range(997)]
    assert len(set(commands)) == len(commands)  # more distinct lines than the parse cache
    assert all(
        rules.decide("bash", {"command": c}).decision is RuleDecision.ALLOW for c in commands
    )
    parse_ns: list[int] = []
    decide_ns: list[int] = []
    clock = time.perf_counter_ns
    for i in range(rounds):
        command = commands[i % len(commands)]
        start = clock()
        parse_command(command)
        parse_ns.append(clock() - start)
        arguments = {"command": command}
        start = clock()
        rules.decide("bash", arguments)
        decide_ns.append(clock() - start)
    p, d = summary_us(parse_ns), summary_us(decide_ns)
    return (
        Figure(
            label=f"RuleSet.decide p50, {RULES} rules, 5-part compound command",
            value=d["p50"],
            unit="µs",
            baseline=p["p50"],
            baseline_label="parsing the same command alone p50",
            target="<= 20 µs",
            met=d["p50"] <= 20.0,
        ),
        Figure(label="RuleSet.decide p99", value=d["p99"], unit="µs"),
    )


async def answer_at_once(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
    return Outcome.ALLOWED_ONCE


async def measure_asks(rounds: int, *, distinct: bool, blocks: int = 50) -> Figure:
    """The ask with and without 1 000 rules, alternating blocks; *distinct*: a different
    command every time (997 of them, more than the engine's parse cache holds), else one
    command asked again and again."""
    plain_ns: list[int] = []
    ruled_ns: list[int] = []
    clock = time.perf_counter_ns
    commands = [f"make build{n} -j{n % 8}" for n in range(997 if distinct else 1)]
    async with (
        open_broker(store=MemoryStore()) as plain,
        open_broker(store=MemoryStore(), rules=thousand_rules()) as ruled,
    ):
        async with plain.open_session() as a, ruled.open_session() as b:
            async with plain.answerer(answer_at_once), ruled.answerer(answer_at_once):
                async with a.turn(), b.turn():
                    asks = [
                        [
                            ApprovalRequest(
                                agent=s.agent, tool_name="bash", arguments={"command": c}
                            )
                            for c in commands
                        ]
                        for s in (a, b)
                    ]
                    decided = await ruled.request_decision(asks[1][0])
                    assert decided.source == "answerer"  # no rule decides it
                    for n in range(200):  # warm-up
                        await plain.request(asks[0][n % len(commands)])
                        await ruled.request(asks[1][n % len(commands)])
                    per_block = max(1, rounds // blocks)
                    for block in range(blocks):
                        for broker, reqs, out in (
                            (plain, asks[0], plain_ns),
                            (ruled, asks[1], ruled_ns),
                        ):
                            for n in range(block * per_block, (block + 1) * per_block):
                                req = reqs[n % len(reqs)]
                                start = clock()
                                await broker.request(req)
                                out.append(clock() - start)
    p, r = summary_us(plain_ns), summary_us(ruled_ns)
    ratio = r["p50"] / p["p50"]
    which = "a different command each time" if distinct else "the same command"
    return Figure(
        label=f"ask no rule decides, {RULES} rules loaded, {which}, p50 (in-memory store)",
        value=r["p50"],
        unit="µs",
        baseline=p["p50"],
        baseline_label="the same asks with no rules p50",
        target=None if distinct else "<= 1.2x",
        met=None if distinct else ratio <= 1.2,
    )


def measure(quick: bool) -> Result:
    """The suite's entry: 2 000 decisions and asks each (quick) or 20 000."""
    rounds = 2_000 if quick else 20_000
    decide, decide_p99 = measure_decide(rounds)
    same = trio.run(partial(measure_asks, rounds, distinct=False))
    distinct = trio.run(partial(measure_asks, rounds, distinct=True))
    return Result(name="rules", figures=(decide, decide_p99, same, distinct))


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
