"""A downstream project set up exactly as the README says passes first time, in a fresh venv.

The README's "Testing code that asks" section is the script: its ``pip install -e`` line
installs this checkout (with the ``testing`` extra) into a new venv, its ``# <file>`` blocks
become the project's files, and pytest runs there. mypy (ours, pointed at that venv) then
checks a typed module of the project: the editable install must expose the package's types.
Building the wheel must print no packaging warning (the license field).
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SECTION = "## Testing code that asks: `broker.testing`"

TYPED = """\
from broker import Outcome
from broker.testing import ScriptedAnswerer


def first_step(answerer: ScriptedAnswerer) -> Outcome:
    step = answerer.script[0]
    assert isinstance(step, Outcome)
    return step
"""
#: A deliberate type error: mypy reports it only if it sees broker's real types (not Any).
MISTYPED = "from broker import Outcome\n\ncount: int = Outcome.ALLOWED_ONCE\n"


def readme_setup() -> tuple[list[str], dict[str, str]]:
    """The install command (argv, the checkout path filled in) and the project's files."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    install = next(
        line.split("#")[0].strip()
        for lang, body in blocks
        if lang == "sh"
        for line in body.splitlines()
        if line.startswith("pip install -e ")
    )
    argv = [part.replace("path/to/broker", str(ROOT)) for part in shlex.split(install)]
    files = {}
    for lang, body in blocks:
        first, _, rest = body.partition("\n")
        if lang in ("toml", "python") and first.startswith("# "):
            files[first[2:].strip()] = rest
    return argv, files


def run(argv: list[str], cwd: pathlib.Path, timeout: float = 240) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_readme_names_the_whole_setup() -> None:
    argv, files = readme_setup()
    assert argv[:3] == ["pip", "install", "-e"]
    assert argv[3] == f"{ROOT}[testing]"
    assert "editable_mode=strict" in argv
    assert set(files) == {"pyproject.toml", "conftest.py", "test_my_tool.py"}
    assert "trio_mode = true" in files["pyproject.toml"]


@pytest.mark.slow
def test_a_downstream_project_following_the_readme_passes(tmp_path: pathlib.Path) -> None:
    argv, files = readme_setup()
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    install = run([str(python), "-m", *argv], tmp_path, timeout=480)
    assert "[testing]" in " ".join(argv)
    assert "Traceback" not in install
    project = tmp_path / "project"
    project.mkdir()
    for name, body in files.items():
        (project / name).write_text(body, encoding="utf-8")
    out = run([str(python), "-W", "error", "-m", "pytest", "-q", "-p", "no:cacheprovider"], project)
    assert re.search(r"^1 passed", out, re.M), out

    (project / "typed.py").write_text(TYPED, encoding="utf-8")
    (project / "mistyped.py").write_text(MISTYPED, encoding="utf-8")
    mypy = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--no-incremental",
        f"--python-executable={python}",
    ]
    run([*mypy, "typed.py"], project)
    done = subprocess.run(
        [*mypy, "mistyped.py"], cwd=project, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 1
    assert 'Incompatible types in assignment (expression has type "Outcome"' in done.stdout


@pytest.mark.slow
def test_building_the_package_prints_no_packaging_warning(tmp_path: pathlib.Path) -> None:
    out = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), str(ROOT)],
        tmp_path,
        timeout=480,
    )
    warnings = [
        line
        for line in out.splitlines()
        if re.search(r"Deprecat|license", line, re.I) and "warning" in line.lower()
    ]
    assert warnings == []
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name.startswith("trio_approval_broker-")
