"""``broker demo``: the README's main job, run as a real subprocess."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest


def demo(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "broker.cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_demo_allow_writes_the_file(tmp_path: pathlib.Path) -> None:
    done = demo("--answer", "allow", "--workspace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "[sandbox: file access denied under read-only mode]" in out
    assert (
        "│ asks:    run `echo escalated > escalated.txt && cat escalated.txt` with "
        "workspace-write access: the user asked to write escalated.txt in the workspace" in out
    )
    assert "file on disk: escalated.txt = 'escalated'" in out
    assert '"outcome":"allowed-once"' in out
    assert (tmp_path / "escalated.txt").read_text() == "escalated\n"


@pytest.mark.slow
def test_demo_reject_writes_nothing(tmp_path: pathlib.Path) -> None:
    done = demo("--answer", "reject", "--workspace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert 'Error: the user rejected escalating this command to "workspace-write"' in done.stdout
    assert "file on disk: escalated.txt does not exist" in done.stdout
    assert '"outcome":"rejected"' in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_demo_interactive_without_input_fails_closed(tmp_path: pathlib.Path) -> None:
    done = demo("--workspace", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "(end of input: rejecting, fail closed)" in done.stdout
    assert list(tmp_path.iterdir()) == []
