"""The README's library example runs as written (docs that match the code)."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
SNAPSHOT = (
    pathlib.Path(__file__).resolve().parent / "snapshots" / "escalation-approved.frames.jsonl"
)


def test_the_readme_example_runs(tmp_path: pathlib.Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "trio.run(main)" in block)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_readme_shows_the_recorded_permission_prompt() -> None:
    """The editor prompt in the README is the recorded frame of the escalation snapshot."""
    blocks = re.findall(r"```json\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    shown = [
        frame
        for frame in map(json.loads, blocks)
        if frame.get("method") == "session/request_permission"
    ]
    recorded = [
        line["frame"]
        for line in map(json.loads, SNAPSHOT.read_text(encoding="utf-8").splitlines())
        if line["frame"].get("method") == "session/request_permission"
    ]
    assert shown == recorded
    assert shown[0]["params"]["toolCall"]["rawInput"]["justification"]
