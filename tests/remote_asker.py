"""Process A of the cross-process answer tests: a broker on a store that asks one question
through its remote answerer and prints what it decided.

Usage: python -m tests.remote_asker STORE [--abort-on-stdin] [--reason TEXT] [--allow-always]
       [--command TEXT] [--project-rules FILE] [--rules FILE]

Prints one JSON line ``{"session": ID}`` once the session is open, then ``{"outcome": ...,
"answeredBy": ..., "id": ...}`` once the question is decided. With ``--abort-on-stdin`` a line
on stdin aborts the question.
"""

from __future__ import annotations

import json
import sys

import trio

from broker import AbortSignal, ApprovalRequest, open_broker
from broker.rules import load_rules


async def main(
    store: str,
    abort_on_stdin: bool,
    reason: str,
    always: bool,
    command: str | None,
    project_rules: str | None,
    rules: str | None,
) -> None:
    signal = AbortSignal()
    loaded = load_rules(rules) if rules is not None else ()
    async with open_broker(store=store, project_rules=project_rules, rules=loaded) as broker:
        remote = broker.remote_answerer(allow_always=always)
        async with broker.answerer(remote), broker.open_session() as session:
            print(json.dumps({"session": session.id}), flush=True)  # noqa: T201
            async with session.turn(), trio.open_nursery() as nursery:
                if abort_on_stdin:

                    async def abort_on_line() -> None:
                        await trio.wrap_file(sys.stdin).readline()
                        signal.abort("stdin")

                    nursery.start_soon(abort_on_line)
                request = ApprovalRequest(
                    agent=session.agent,
                    tool_name="bash",
                    call_id="call_1",
                    reason=reason,
                    display_reason="delete the build directory",
                    signal=signal,
                    arguments=None if command is None else {"command": command},
                )
                decision = await broker.request_decision(request)
                nursery.cancel_scope.cancel()
            print(  # noqa: T201
                json.dumps(
                    {
                        "id": decision.id,
                        "outcome": decision.outcome,
                        "answeredBy": decision.answered_by,
                        **({"answers": decision.answers} if decision.answers else {}),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    extra = sys.argv[2:]

    def option(name: str) -> str | None:
        return extra[extra.index(name) + 1] if name in extra else None

    trio.run(
        main,
        sys.argv[1],
        "--abort-on-stdin" in extra,
        option("--reason") or "rm -rf build",
        "--allow-always" in extra,
        option("--command"),
        option("--project-rules"),
        option("--rules"),
    )
