"""A hook call as the agent runs it: ``broker hook claude-code`` from process start to exit,
decided by a rule in a running ``broker serve``, against a stdlib-only Python hook script that
allows at once.

    python -m bench.hook [--quick]

Both are new processes of the same interpreter, fed the same Claude Code ``PreToolUse`` input
on stdin, measured in alternating order in the same run (target: p50 <= 1.5x the script). Where
the time goes, shown beside it: the interpreter's start with nothing imported, the start plus
``import broker_hook`` (what the hook imports), and one question to the service over its
socket from a warm process (the service's share: read, decide by rule, log the pair, reply).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench._suite import Figure, Result, standalone
from broker_hook._client import ask

COMMAND = "echo hi > out.txt"
RULES = f"""\
[[rules]]
decision = "allow"
tool = "Bash"
[rules.args]
command = "{COMMAND}"
"""
#: The baseline: what a hook that allows at once costs (reads its input, prints a decision).
BASELINE = """\
import json, sys
json.load(sys.stdin)
out = {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
print(json.dumps({"hookSpecificOutput": out}))
"""
HOOK_INPUT = json.dumps(
    {
        "session_id": "bench-session",
        "cwd": "/tmp",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": COMMAND, "description": "write a file"},
        "tool_use_id": "toolu_bench",
    }
).encode()


def _timed(argv: list[str], stdin: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, check=True, timeout=60)
    return time.perf_counter() - started, done.stdout


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def measure(quick: bool) -> Result:
    """The suite's entry: 30 runs of each (quick) or 300."""
    runs = 30 if quick else 300
    broker = str(pathlib.Path(sys.executable).parent / "broker")
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as scratch:
        root = pathlib.Path(scratch)
        (root / "rules.toml").write_text(RULES)
        (root / "allow.py").write_text(BASELINE)
        sock = str(root / "run" / "serve.sock")
        service = subprocess.Popen(
            [broker, "serve", "--store", str(root / "serve.sqlite"), "--socket", sock,
             "--rules", str(root / "rules.toml")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            assert service.stderr is not None
            line = service.stderr.readline()
            if "listening on" not in line:
                raise RuntimeError(f"broker serve did not start: {line}")
            hook = [broker, "hook", "claude-code", "--socket", sock]
            script = [sys.executable, str(root / "allow.py")]
            bare = [sys.executable, "-c", "pass"]
            imports = [sys.executable, "-c", "import broker_hook"]
            ours: list[float] = []
            theirs: list[float] = []
            starts: list[float] = []
            imported: list[float] = []
            for i in range(runs):
                pair = ((hook, ours), (script, theirs))
                for argv, into in pair if i % 2 == 0 else pair[::-1]:
                    elapsed, out = _timed(argv, HOOK_INPUT)
                    assert b'"allow"' in out, out  # decided by the rule, not refused
                    into.append(elapsed)
                starts.append(_timed(bare, b"")[0])
                imported.append(_timed(imports, b"")[0])
            question = {
                "v": 1, "agent": "claude-code", "event": "PreToolUse", "session": "bench-session",
                "tool": "Bash", "arguments": {"command": COMMAND}, "timeoutMs": 30000,
            }  # fmt: skip
            trips: list[float] = []
            for _ in range(runs):
                started = time.perf_counter()
                reply = ask(sock, question, 30)
                trips.append(time.perf_counter() - started)
                assert reply["outcome"] == "allowed-once", reply
        finally:
            service.send_signal(signal.SIGTERM)
            service.communicate(timeout=60)
    hook_p50, script_p50 = _p50_ms(ours), _p50_ms(theirs)
    ratio = hook_p50 / script_p50
    figures = (
        Figure(
            label="broker hook claude-code, decided by a rule, process start to exit (p50)",
            value=hook_p50,
            unit="ms",
            baseline=script_p50,
            baseline_label="a stdlib-only Python hook that allows at once (p50)",
            target="<= 1.5x",
            met=ratio <= 1.5,
        ),
        Figure(
            label="  of which: the interpreter's start, nothing imported (p50)",
            value=_p50_ms(starts),
            unit="ms",
        ),
        Figure(
            label="  of which: start + import broker_hook (p50)",
            value=_p50_ms(imported),
            unit="ms",
        ),
        Figure(
            label="  of which: one question to broker serve from a warm process (p50)",
            value=_p50_ms(trips),
            unit="ms",
        ),
    )
    notes = (f"{runs} runs of each, alternating; pid {os.getpid()}",)
    return Result(name="hook", figures=figures, notes=notes)


if __name__ == "__main__":
    sys.exit(standalone(measure, __doc__))
