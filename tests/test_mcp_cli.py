"""``broker mcp-gate``'s command line: mistakes a user can make are one line and exit 2, a
server that fails on its own is said and exits 1, a client that simply leaves exits 0."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parent.parent
TIMEOUT = 60


def gate(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli", "mcp-gate", *argv],
        input="",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        cwd=ROOT,
    )


def test_no_server_command_is_a_usage_error() -> None:
    done = gate("--store", ":memory:")
    assert done.returncode == 2
    assert done.stderr == (
        "broker mcp-gate: no MCP server to gate: name it after --, e.g. broker mcp-gate -- "
        "npx -y SERVER, or pass --upstream-url http://HOST:PORT/mcp\n"
    )


def test_a_url_and_a_command_are_exclusive() -> None:
    done = gate("--upstream-url", "http://127.0.0.1:9/mcp", "--", sys.executable, "-V")
    assert done.returncode == 2
    assert done.stderr == (
        "broker mcp-gate: --upstream-url and a server command after -- are exclusive: gate one "
        "MCP server, by its URL or by its command\n"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "ftp://host/mcp",
            "--upstream-url must be an http:// or https:// URL with a host, e.g. "
            "http://127.0.0.1:8000/mcp, got 'ftp://host/mcp'",
        ),
        (
            "127.0.0.1:8000/mcp",
            "--upstream-url must be an http:// or https:// URL with a host, e.g. "
            "http://127.0.0.1:8000/mcp, got '127.0.0.1:8000/mcp'",
        ),
        (
            "http://host:99999/mcp",
            "--upstream-url 'http://host:99999/mcp' is not a URL (Port out of range 0-65535): "
            "e.g. http://127.0.0.1:8000/mcp",
        ),
        (
            "http://me:secret@host/mcp",
            "--upstream-url must not carry credentials (user:password@): the gate sends none, "
            "e.g. http://127.0.0.1:8000/mcp",
        ),
    ],
)
def test_a_bad_upstream_url_is_one_line(url: str, message: str) -> None:
    done = gate("--store", ":memory:", "--upstream-url", url)
    assert done.returncode == 2
    assert done.stderr == f"broker mcp-gate: {message}\n"


def test_a_server_that_cannot_start_is_named() -> None:
    done = gate("--store", ":memory:", "--", "/nonexistent/mcp-server", "--flag")
    assert done.returncode == 2
    assert done.stderr == (
        "broker mcp-gate: cannot start the MCP server '/nonexistent/mcp-server': No such file "
        "or directory: check SERVER_CMD (the command after --)\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'allow = "read_*"\n',
            "allow must be a list of non-empty tool-name patterns, got "
            "'read_*': write allow = [\"read_*\"]",
        ),
        ("allow = [\n", "not TOML"),
        (
            'alow = ["x"]\n',
            "unknown key 'alow': write [[rules]] tables (or allow/deny lists of tool names)",
        ),
    ],
)
def test_a_bad_rules_file_is_one_line(tmp_path: pathlib.Path, text: str, message: str) -> None:
    rules = tmp_path / "gate.toml"
    rules.write_text(text)
    done = gate("--store", ":memory:", "--rules", str(rules), "--", sys.executable, "-V")
    assert done.returncode == 2
    assert done.stderr.startswith(f"broker mcp-gate: rules file {rules}: {message}")
    assert done.stderr.count("\n") == 1


def test_a_server_that_fails_on_its_own_exits_1_saying_so() -> None:
    code = "import sys; print('cannot read my config', file=sys.stderr); sys.exit(3)"
    done = gate("--store", ":memory:", "--", sys.executable, "-c", code)
    assert done.returncode == 1
    assert done.stderr == (
        "cannot read my config\n"
        f"broker mcp-gate: the MCP server {sys.executable!r} exited with status 3: see its "
        "messages above, and check SERVER_CMD\n"
    )


def test_a_client_that_leaves_ends_the_gate_with_0(tmp_path: pathlib.Path) -> None:
    upstream = [sys.executable, "-m", "tests.mcp.upstream", str(tmp_path / "record.jsonl")]
    done = gate("--store", ":memory:", "--", *upstream)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_a_client_that_leaves_ends_an_http_gate_with_0() -> None:
    # Nothing was sent, so nothing tried the URL (nothing listens on port 9).
    done = gate("--store", ":memory:", "--upstream-url", "http://127.0.0.1:9/mcp")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
