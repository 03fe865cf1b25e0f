"""Signals settle: Ctrl-C at the demo's prompt (a real pty) and SIGINT/SIGTERM to ``broker acp``.

Each run is a real subprocess on a real SQLite file. Afterwards the question is paired
``cancelled``, its turn ended, the store verifies, and the exit status is 128 + the signal.
"""

from __future__ import annotations

import json
import os
import pathlib
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from typing import IO, Any

import pytest

from broker import ApprovalDecided, Outcome, TurnEnd, decode_event
from broker.store import open_sqlite_reader
from broker.store._logtools import verify_store

pytestmark = pytest.mark.slow


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {needle!r}; saw {seen.decode()!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            seen += chunk
    return seen


def _drain(fd: int, deadline: float) -> bytes:
    seen = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


def _events(store: pathlib.Path) -> list[Any]:
    with open_sqlite_reader(store) as reader:
        [info] = reader.sessions()
        return [decode_event(row.line) for row in reader.rows(info.session_id)]


def _assert_settled(store: pathlib.Path) -> None:
    events = _events(store)
    decided = [e for e in events if isinstance(e, ApprovalDecided)]
    assert [d.outcome for d in decided] == [Outcome.CANCELLED], " ".join(e.TYPE for e in events)
    assert not decided[0].recovered  # settled by the live process, not by a later recovery
    assert isinstance(events[-1], TurnEnd)
    assert events[-1].reason.kind == "cancelled"
    verify_store(store)  # no crash tail: pairs complete, checkpoints fit


def _demo_on_a_pty(tmp_path: pathlib.Path, keys: list[bytes]) -> tuple[int, str]:
    """Run the demo on a pty, type *keys* at its prompt (a pause between them); (status, text)."""
    store = tmp_path / "demo.sqlite"
    workspace = tmp_path / "ws"
    pid, fd = pty.fork()
    if pid == 0:  # the child: the demo on the pty, asking at the terminal
        os.execv(
            sys.executable,
            [
                sys.executable,
                "-W",
                "error",
                "-m",
                "broker.cli",
                "demo",
                "--store",
                str(store),
                "--workspace",
                str(workspace),
            ],
        )
    try:
        deadline = time.monotonic() + 60
        before = _read_until(fd, b"answer [a/r]: ", deadline)
        # A typed ^C makes the terminal discard output it still holds (unless NOFLSH): the
        # broker's last line could be thrown away by the line discipline, not by the broker.
        modes = termios.tcgetattr(fd)
        modes[3] |= termios.NOFLSH
        termios.tcsetattr(fd, termios.TCSANOW, modes)
        for key in keys:
            os.write(fd, key)  # Ctrl-C: the terminal sends SIGINT to the foreground group
            time.sleep(0.005)
        after = _drain(fd, time.monotonic() + 20)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    output = (before + after).decode(errors="replace")
    assert not (workspace / "escalated.txt").exists()
    return status, output


@pytest.mark.parametrize("presses", [1, 2], ids=["once", "twice"])
def test_ctrl_c_at_the_demo_prompt_settles_and_exits_130(
    tmp_path: pathlib.Path, presses: int
) -> None:
    status, output = _demo_on_a_pty(tmp_path, [b"\x03"] * presses)
    assert os.WIFEXITED(status), output
    assert os.WEXITSTATUS(status) == 130, output
    assert "Traceback" not in output
    assert "broker demo: SIGINT received" in output
    _assert_settled(tmp_path / "demo.sqlite")


def _send(stdin: IO[str], message: dict[str, Any]) -> None:
    stdin.write(json.dumps(message) + "\n")
    stdin.flush()


def _receive(
    stdout: IO[str], deadline: float, method: str | None = None, id_: int | None = None
) -> dict[str, Any]:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {method or id_}")
        ready, _, _ = select.select([stdout], [], [], left)
        if not ready:
            continue
        line = stdout.readline()
        if not line:
            raise AssertionError("the agent closed stdout")
        frame = json.loads(line)
        if method is not None and frame.get("method") == method:
            return dict(frame)
        if id_ is not None and frame.get("id") == id_ and "method" not in frame:
            return dict(frame)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_broker_acp_settles_the_pending_question(
    tmp_path: pathlib.Path, signum: int, status: int
) -> None:
    store = tmp_path / "acp.sqlite"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-W", "error", "-m", "broker.cli", "acp", "--store", str(store)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    try:
        deadline = time.monotonic() + 60
        _send(
            proc.stdin,
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}},
        )
        _receive(proc.stdout, deadline, id_=1)
        _send(
            proc.stdin,
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/new",
                "params": {"cwd": str(workspace), "mcpServers": []},
            },
        )
        session_id = _receive(proc.stdout, deadline, id_=2)["result"]["sessionId"]
        _send(
            proc.stdin,
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": [{"type": "text", "text": "go"}]},
            },
        )
        _receive(proc.stdout, deadline, method="session/request_permission")
        proc.send_signal(signum)
        code = proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
        proc.stdout.close()
        proc.stderr.close()
    assert code == status, err
    assert "Traceback" not in err
    assert f"broker acp: {signal.Signals(signum).name} received" in err
    _assert_settled(store)
    assert not (workspace / "escalated.txt").exists()


def test_a_crashed_broker_acp_exits_non_zero(tmp_path: pathlib.Path) -> None:
    # The frame trace cannot be written (a full disk): the error must surface, not exit 0.
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "broker.cli",
            "acp",
            "--store",
            ":memory:",
            "--trace-frames",
            "/dev/full",
        ],
        input='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}\n',
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, done.stderr
    assert "No space left on device" in done.stderr
    assert "ExceptionGroup" not in done.stderr
