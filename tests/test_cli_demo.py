"""``broker demo``: the README's main job, run as a real subprocess."""

from __future__ import annotations

import pathlib
import re
import shlex
import subprocess
import sys

import pytest


@pytest.fixture(autouse=True)
def scratch_tmpdir(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The demo keeps its default store under $TMPDIR: keep that inside pytest's tmp."""
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("tmpdir")))


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


@pytest.mark.slow
def test_demo_keeps_its_store_and_prints_a_log_show_that_works(tmp_path: pathlib.Path) -> None:
    done = demo("--answer", "reject", "--workspace", str(tmp_path / "ws"))
    assert done.returncode == 0, done.stderr
    # One word for the turn's end: the log's, as `broker log show` prints it.
    assert "turn 1 ended: completed" in done.stdout
    assert "end_turn" not in done.stdout
    match = re.search(r"^the whole session: (broker log show .+)$", done.stdout, re.M)
    assert match is not None, done.stdout
    argv = shlex.split(match.group(1))
    assert pathlib.Path(argv[3]).exists()
    assert "kept after the demo" in done.stdout
    shown = subprocess.run(
        [sys.executable, "-W", "error", "-m", "broker.cli", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "turn 1 ended: completed" in shown.stdout
    assert "decided" in shown.stdout
