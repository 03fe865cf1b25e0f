"""``broker serve`` as a real process, and ``broker hook`` runs against it, for the tests of the
service and of the real agents' hooks."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

TIMEOUT = 30.0
#: The console script pip made: ``broker hook`` as an agent runs it.
BROKER = str(pathlib.Path(sys.executable).parent / "broker")


class Service:
    """A running ``broker serve``: its store, socket and process."""

    def __init__(self, store: pathlib.Path, socket: pathlib.Path, process: subprocess.Popen[str]):
        self.store = store
        self.socket = socket
        self.process = process
        #: What it wrote on stderr up to "listening on" (the inbox's address, with --inbox).
        self.banner: list[str] = []

    def stop(self) -> str:
        """SIGTERM, wait, and return what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=TIMEOUT)
        return err


@contextmanager
def service(
    tmp_path: pathlib.Path, *extra: str, store: pathlib.Path | None = None
) -> Iterator[Service]:
    """Start ``broker serve`` on a store and a socket under *tmp_path*; stop it at the end."""
    store = store or tmp_path / "serve.sqlite"
    sock = tmp_path / "run" / "serve.sock"
    process = subprocess.Popen(
        [BROKER, "serve", "--store", str(store), "--socket", str(sock), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    running = Service(store, sock, process)
    try:
        deadline = time.monotonic() + TIMEOUT
        assert process.stderr is not None
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            running.banner.append(line)
            if "listening on" in line:
                break
            if not line and process.poll() is not None:
                pytest.fail(f"broker serve exited {process.returncode}: {process.stderr.read()}")
        else:
            pytest.fail("broker serve did not start listening")
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def hook_input(
    command: str,
    *,
    session: str = "sess-1",
    event: str = "PreToolUse",
    call: str | None = "toolu_1",
    cwd: str = "/work/project",
) -> dict[str, Any]:
    """A hook's stdin as Claude Code (and Codex) write it, for a Bash call of *command*."""
    data: dict[str, Any] = {
        "session_id": session,
        "transcript_path": "/tmp/t.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "write a file"},
    }
    if call is not None:
        data["tool_use_id"] = call
    return data


def start_hook(
    agent: str, stdin: dict[str, Any] | bytes, sock: pathlib.Path | str, *extra: str
) -> subprocess.Popen[str]:
    """``broker hook AGENT --socket SOCK`` with *stdin* written and closed."""
    process = subprocess.Popen(
        [BROKER, "hook", agent, "--socket", str(sock), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    raw = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    process.stdin.write(raw.decode("utf-8", "surrogateescape"))
    process.stdin.close()
    process.stdin = None  # written and closed: communicate() has nothing more to send
    return process


def finish(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, out, err


def hook(
    agent: str, stdin: dict[str, Any] | bytes, sock: pathlib.Path | str, *extra: str
) -> tuple[int, str, str]:
    """Run ``broker hook`` to the end: exit status, stdout, stderr."""
    return finish(start_hook(agent, stdin, sock, *extra))


def decision(stdout: str) -> dict[str, Any]:
    """The ``hookSpecificOutput`` of a hook's stdout."""
    output: dict[str, Any] = json.loads(stdout)["hookSpecificOutput"]
    return output


def broker(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env=env,
    )


def wait_pending(store: pathlib.Path | str, count: int = 1) -> list[dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        listed = broker("pending", str(store), "--json")
        assert listed.returncode == 0, listed.stderr
        rows: list[dict[str, Any]] = json.loads(listed.stdout)
        if len(rows) >= count:
            return rows
        time.sleep(0.05)
    pytest.fail(f"{count} question(s) did not appear in broker pending")


def log_events(store: pathlib.Path | str, session: str) -> list[dict[str, Any]]:
    """Every event of *session* in *store*, as exported."""
    exported = broker("log", "export", str(store), "--session", session)
    assert exported.returncode == 0, exported.stderr
    return [json.loads(line) for line in exported.stdout.splitlines() if line.strip()]


def env_without_socket() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "BROKER_SOCKET"}
