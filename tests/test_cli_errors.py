"""Mistakes a user can make at the ``broker`` command: one line on stderr, exit 2 (or 1 when a
check failed), no traceback unless ``--debug``. Run as real subprocesses."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import trio

from broker import __version__
from broker._events import TurnEnd, TurnEndReason, TurnStart
from broker.cli import build_parser
from broker.store.sqlite import open_sqlite_store


def broker(
    *args: str, stdout: int | None = subprocess.PIPE, stdin: int = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "broker.cli", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=stdin,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str], status: int, prefix: str) -> str:
    """The run failed with *status* and exactly one stderr line starting with *prefix*."""
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


@pytest.fixture
def store(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "store.sqlite"

    async def write() -> None:
        with trio.fail_after(10):
            async with open_sqlite_store(path) as s:
                await s.create_session("s", "root")
                for turn in range(1, 200):
                    await s.append("s", [TurnStart(turn=turn)])
                    await s.append("s", [TurnEnd(turn=turn, reason=TurnEndReason(kind="x"))])

    trio.run(write)
    for leftover in path.parent.glob("store.sqlite-*"):
        leftover.unlink()
    return path


@pytest.fixture
def damaged(store: pathlib.Path) -> pathlib.Path:
    """*store* with every page after the header overwritten (corrupted pages)."""
    size = store.stat().st_size
    with store.open("r+b") as f:
        f.seek(4096)
        f.write(b"\xa5" * (size - 4096))
    return store


@pytest.fixture
def not_a_store(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "notes.sqlite"
    path.write_text("not a database\n")
    return path


def test_demo_and_acp_on_a_file_that_is_not_a_store(not_a_store: pathlib.Path) -> None:
    for command in ("demo", "acp"):
        line = one_line(
            broker(command, "--store", str(not_a_store)), 2, f"broker {command}: store file"
        )
        assert line.endswith("pass the path of a store created by broker, or a new file name")


def test_a_store_path_in_a_missing_directory(tmp_path: pathlib.Path) -> None:
    line = one_line(
        broker("demo", "--answer", "allow", "--store", str(tmp_path / "no" / "s.sqlite")),
        2,
        "broker demo: cannot open store file",
    )
    assert line.endswith("create it first")


def test_log_commands_on_a_damaged_store(damaged: pathlib.Path) -> None:
    expected = (
        f"store '{damaged}' is damaged or not a broker store (sqlite: database disk image is "
        "malformed): restore it from a copy, or pass another file"
    )
    assert one_line(broker("log", "show", str(damaged)), 2, "broker log show: ") == (
        f"broker log show: {expected}"
    )
    # For verify, a damaged file is a failed check.
    assert one_line(broker("log", "verify", str(damaged)), 1, "broker log verify: ") == (
        f"broker log verify: {expected}"
    )


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_shows_the_traceback(damaged: pathlib.Path, where: str) -> None:
    argv = ["log", "show", str(damaged)]
    done = broker(*(["--debug", *argv] if where == "before" else [*argv, "--debug"]))
    assert done.returncode == 1
    assert "Traceback" in done.stderr
    assert "sqlite3.DatabaseError" in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_on_stdout(store: pathlib.Path) -> None:
    with open("/dev/full", "w") as full:
        done = broker("log", "show", str(store), "s", stdout=full.fileno())
    assert one_line(done, 2, "broker log show: ") == (
        "broker log show: cannot write output: No space left on device: free some space, "
        "or write somewhere else"
    )


def test_a_closed_pipe_ends_quietly(store: pathlib.Path) -> None:
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = broker("log", "show", str(store), "s", stdout=writer)
    finally:
        os.close(writer)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["chaos", "--seeds", "0"],
            "broker chaos: argument --seeds: must be at least 1, got 0 (see broker chaos --help)",
        ),
        (
            ["chaos", "--asks", "many"],
            "broker chaos: argument --asks: expected a whole number, got 'many' "
            "(see broker chaos --help)",
        ),
        (
            ["chaos", "--fault-rate", "1.5"],
            "broker chaos: argument --fault-rate: must be from 0 to 1, got '1.5' "
            "(see broker chaos --help)",
        ),
        (
            ["acp", "--permission-deadline", "inf"],
            "broker acp: argument --permission-deadline: must be a finite number of seconds "
            "above 0, got 'inf' (see broker acp --help)",
        ),
        (
            ["acp", "--config", "missing.toml"],
            "broker acp: config 'missing.toml' cannot be read: No such file or directory; "
            "pass an existing TOML file",
        ),
        ([], "broker: the following arguments are required: COMMAND (see broker --help)"),
    ],
)
def test_bad_arguments_are_one_line_and_status_2(argv: list[str], line: str) -> None:
    assert one_line(broker(*argv), 2, "broker") == line


def test_version() -> None:
    done = broker("--version")
    assert done.returncode == 0
    assert done.stdout == f"broker {__version__}\n"


def _helps() -> list[tuple[str, str]]:
    parser = build_parser()
    out = [("broker", parser.format_help())]
    stack = [parser]
    while stack:
        for action in stack.pop()._actions:
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                for sub in choices.values():
                    out.append((sub.prog, sub.format_help()))
                    stack.append(sub)
    return out


def test_help_texts_are_plain_words_with_examples() -> None:
    helps = _helps()
    assert {prog for prog, _ in helps} >= {
        "broker",
        "broker demo",
        "broker acp",
        "broker chaos",
        "broker log",
        "broker log show",
    }
    for prog, text in helps:
        assert "``" not in text, prog
        assert ":func:" not in text, prog
    examples = {prog for prog, text in helps if "examples:" in text}
    assert examples >= {"broker", "broker demo", "broker acp", "broker chaos", "broker log"}


def test_the_readme_error_example_is_what_broker_prints() -> None:
    readme = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text("utf-8")
    (block,) = re.findall(r"```console\n(.*?)```", readme, re.S)
    command, *expected = block.splitlines()
    argv = shlex.split(command.removeprefix("$ "))
    assert argv[0] == "broker"
    done = broker(*argv[1:])
    assert done.returncode == 2
    assert (done.stdout + done.stderr).splitlines() == expected
