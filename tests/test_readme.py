"""The README's library example runs as written (docs that match the code), and the README stays
a guide: short, no development history, every relative link naming a file of the repository."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 250
#: Development history: "stop 30", "issue 26", or a commit hash (7 to 40 hex digits standing
#: alone, at least one a digit and one a letter, so plain words and numbers do not count).
HISTORY = re.compile(
    r"\b(?:stop|issue)s?\s+\d+"
    r"|(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])",
    re.I,
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
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


def history_in(text: str) -> list[str]:
    """The history-looking tokens of *text* (``stop 31``, ``issue 26``, ``06bbb62``)."""
    return [match.group(0) for match in HISTORY.finditer(text)]


def broken_links(doc: pathlib.Path) -> list[str]:
    """The relative links ``](path)`` of *doc* that name no file or folder of the repository."""
    broken = []
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (a public project's page) or an anchor in the page itself
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.is_relative_to(ROOT) or not path.exists():
            broken.append(target)
    return broken


def outside_paths(text: str) -> list[str]:
    """Paths that climb out of the repository (``../shared/spec.md``), linked or quoted."""
    return re.findall(r"(?<![\w.])\.\./[^\s)`]*", text)


def test_the_readme_is_a_guide_not_a_diary() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    assert history_in(text) == []
    assert broken_links(README) == []
    assert outside_paths(text) == []


def test_the_guide_checks_would_see_a_diary(tmp_path: pathlib.Path) -> None:
    """The checks above are not vacuous: each finds what it is meant to find."""
    assert history_in("see stop 31, and Issue 26, fixed in 06bbb62 (de8976c)") == [
        "stop 31",
        "Issue 26",
        "06bbb62",
        "de8976c",
    ]
    assert history_in("1000000 asks, a defaced page, sha256, uuid-1, 0.1.1-rc.2") == []
    doc = tmp_path / "doc.md"
    doc.write_text("[a](design/nowhere.md) [b](https://trio.readthedocs.io) [c](#x)")
    assert broken_links(doc) == ["design/nowhere.md"]
    assert outside_paths("the contract in `../shared/spec/approval-seam.md`") == [
        "../shared/spec/approval-seam.md"
    ]
