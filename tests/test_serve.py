"""``broker serve`` and ``broker hook claude-code|codex`` as real processes (issue 34, items 1-4):
each hook call one question of its agent session's broker session, answered by a rule or from
elsewhere, in the agent's own hook format, and never failing open."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from broker.serve import session_id_for

from .serve_support import (
    BROKER,
    broker,
    decision,
    finish,
    hook,
    hook_input,
    log_events,
    service,
    start_hook,
    wait_pending,
)

pytestmark = pytest.mark.slow

RULES = """\
[[rules]]
decision = "allow"
tool = "Bash"
[rules.args]
command = "echo hi > out.txt"

[[rules]]
decision = "deny"
tool = "Bash"
command = "rm"
reason = "deleting files is not allowed here"
"""


@pytest.fixture
def rules(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "rules.toml"
    path.write_text(RULES)
    return path


def pairs(store: pathlib.Path, agent: str, session: str) -> list[dict[str, object]]:
    """The decided events of that agent session's broker session."""
    sid = session_id_for(agent, session)
    return [e["data"] for e in log_events(store, sid) if e["type"] == "approval/decided"]


def test_a_rule_allows_in_claude_codes_words_and_the_log_says_which(
    tmp_path: pathlib.Path, rules: pathlib.Path
) -> None:
    with service(tmp_path, "--rules", str(rules)) as running:
        status, out, err = hook("claude-code", hook_input("echo hi > out.txt"), running.socket)
        assert status == 0, err
        assert decision(out) == {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": f"broker: allowed by the project rule 1 of {rules}",
        }
        status, out, _ = hook("claude-code", hook_input("rm -rf build"), running.socket)
        assert (status, decision(out)["permissionDecision"]) == (0, "deny")
        assert decision(out)["permissionDecisionReason"] == (
            f"broker: denied by the project rule 2 of {rules}: deleting files is not allowed here"
        )
    decided = pairs(running.store, "claude-code", "sess-1")
    assert [(d["outcome"], d["source"], d["ruleIndex"]) for d in decided] == [
        ("allowed-once", "rule", 1),
        ("rejected", "rule", 2),
    ]
    events = log_events(running.store, session_id_for("claude-code", "sess-1"))
    asked = [e["data"] for e in events if e["type"] == "approval/asked"]
    assert [(a["toolName"], a["callId"]) for a in asked] == [("Bash", "toolu_1")] * 2
    assert broker("log", "verify", str(running.store)).returncode == 0


def test_an_answer_from_another_process_reaches_the_model(
    tmp_path: pathlib.Path, rules: pathlib.Path
) -> None:
    with service(tmp_path, "--rules", str(rules)) as running:
        asking = start_hook("claude-code", hook_input("touch notes.md"), running.socket)
        (row,) = wait_pending(running.store)
        # What the person sees: the agent, its session, the directory, the exact command.
        assert row["displayReason"] == (
            "Claude Code (session sess-1) in /work/project asks to run Bash: touch notes.md"
        )
        assert (row["tool"], row["callId"], row["always"]) == ("Bash", "toolu_1", "Bash: touch")
        assert row["agent"] == "Claude Code session sess-1"
        assert row["reason"] == "write a file"  # the model's description of the call
        assert row["arguments"] == {"command": "touch notes.md", "description": "write a file"}
        listed = broker("pending", str(running.store)).stdout
        assert "  agent: Claude Code session sess-1\n" in listed
        assert '  arguments: {"command": "touch notes.md", "description": "write a file"}' in listed
        answered = broker(
            "answer", str(running.store), row["id"], "reject", "--by", "alice",
            "--message", "use the notes/ folder instead",
        )  # fmt: skip
        assert answered.returncode == 0, answered.stderr
        status, out, _ = finish(asking)
        assert status == 0
        assert decision(out)["permissionDecision"] == "deny"
        assert decision(out)["permissionDecisionReason"] == (
            "broker: rejected by alice: do not run this call; ask the user what to do instead; "
            "they said: use the notes/ folder instead"
        )
        # Allowed from elsewhere, "always" for the session: the next such call is a grant.
        asking = start_hook("claude-code", hook_input("touch a.md", call="toolu_2"), running.socket)
        (row,) = wait_pending(running.store)
        answered = broker("answer", str(running.store), row["id"], "always", "--by", "bob")
        assert answered.returncode == 0, answered.stderr
        assert decision(finish(asking)[1])["permissionDecision"] == "allow"
        status, out, _ = hook("claude-code", hook_input("touch b.md"), running.socket)
        assert decision(out)["permissionDecisionReason"] == (
            "broker: allowed by a grant this session holds"
        )
    decided = pairs(running.store, "claude-code", "sess-1")
    assert decided[0]["message"] == "use the notes/ folder instead"
    shown = broker("log", "show", str(running.store), session_id_for("claude-code", "sess-1"))
    assert "by alice [answerer: board] saying 'use the notes/ folder instead'" in shown.stdout
    assert [(d["outcome"], d["source"], d.get("answeredBy")) for d in decided] == [
        ("rejected", "answerer", "alice"),
        ("allowed-once", "answerer", "bob"),
        ("allowed-once", "grant", None),
    ]


def test_codex_pre_tool_use_says_nothing_to_allow_and_denies_in_its_words(
    tmp_path: pathlib.Path, rules: pathlib.Path
) -> None:
    with service(tmp_path, "--rules", str(rules)) as running:
        status, out, err = hook("codex", hook_input("echo hi > out.txt"), running.socket)
        assert (status, out) == (0, ""), err  # no objection: Codex's PreToolUse cannot allow
        status, out, _ = hook("codex", hook_input("rm x"), running.socket)
        assert decision(out)["permissionDecision"] == "deny"
        asked = hook_input("echo hi > out.txt", event="PermissionRequest", call=None)
        status, out, _ = hook("codex", asked, running.socket)
        assert decision(out) == {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
        asked = hook_input("rm x", event="PermissionRequest", call=None)
        status, out, _ = hook("claude-code", asked, running.socket)
        assert decision(out)["decision"] == {
            "behavior": "deny",
            "message": f"broker: denied by the project rule 2 of {rules}: deleting files is "
            "not allowed here",
        }
    # Codex and Claude Code sessions are separate broker sessions, even with the same id.
    assert len(pairs(running.store, "codex", "sess-1")) == 3
    assert len(pairs(running.store, "claude-code", "sess-1")) == 1


def test_no_service_is_a_refusal_that_names_the_fix(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nowhere.sock"
    for agent in ("claude-code", "codex"):
        status, out, _ = hook(agent, hook_input("echo hi"), missing)
        assert status == 0
        assert decision(out)["permissionDecision"] == "deny"
        assert decision(out)["permissionDecisionReason"] == (
            f"broker: no approval service at {missing} (No such file or directory): start it "
            "with 'broker serve' (or set BROKER_SOCKET to where it listens)"
        )


@pytest.mark.parametrize(
    ("stdin", "why"),
    [
        (b"not json", "the hook input is not JSON"),
        (b"[1, 2]", "the hook input is not a JSON object"),
        (json.dumps({"hook_event_name": "Stop"}).encode(), "hook_event_name 'Stop' is not one"),
        (b"[" * 200_000, "the hook input is nested too deeply to be read"),
    ],
)
def test_an_input_that_cannot_be_read_blocks_with_exit_2(
    tmp_path: pathlib.Path, stdin: bytes, why: str
) -> None:
    status, out, err = hook("claude-code", stdin, tmp_path / "s.sock")
    assert (status, out) == (2, "")
    assert err.startswith(f"broker: {why}")


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        ((), "the agent is missing"),
        (("gemini",), "unexpected argument 'gemini'"),
        (("codex", "--timeout", "soon"), "argument --timeout: not a number: 'soon'"),
        (("codex", "--socket"), "argument --socket: expected a value"),
    ],
)
def test_a_command_line_it_cannot_run_with_blocks_with_exit_2(
    argv: tuple[str, ...], why: str
) -> None:
    done = subprocess.run(
        [BROKER, "hook", *argv],
        input=json.dumps(hook_input("echo hi")),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"broker hook: {why}")
    shown = subprocess.run(
        [BROKER, "hook", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    assert shown.stdout.startswith("usage: broker hook {claude-code,codex}")


def test_a_known_event_with_a_bad_field_is_denied_in_that_events_words(
    tmp_path: pathlib.Path,
) -> None:
    bad = hook_input("echo hi")
    bad["tool_input"] = "echo hi"
    status, out, _ = hook("claude-code", bad, tmp_path / "s.sock")
    assert status == 0
    assert decision(out)["permissionDecisionReason"] == "broker: tool_input must be a JSON object"


def test_a_hook_that_gives_up_first_refuses_and_the_question_is_withdrawn(
    tmp_path: pathlib.Path,
) -> None:
    with service(tmp_path) as running:
        status, out, _ = hook(
            "claude-code", hook_input("make deploy"), running.socket, "--timeout", "1.5"
        )
        assert status == 0
        assert decision(out)["permissionDecision"] == "deny"
        # A hook killed by its agent while waiting: its question is withdrawn, not left open.
        asking = start_hook("claude-code", hook_input("make x", call="t2"), running.socket)
        wait_pending(running.store)
        asking.kill()
        finish(asking)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and wait_pending_count(running.store):
            time.sleep(0.05)
    decided = pairs(running.store, "claude-code", "sess-1")
    assert [(d["outcome"], d["source"]) for d in decided] == [
        ("cancelled", "abort"),
        ("cancelled", "abort"),
    ]


def wait_pending_count(store: pathlib.Path) -> int:
    listed = broker("pending", str(store), "--json")
    return len(json.loads(listed.stdout))


def test_calls_in_parallel_are_each_one_question(tmp_path: pathlib.Path) -> None:
    with service(tmp_path) as running:
        first = start_hook("claude-code", hook_input("make a", call="t1"), running.socket)
        second = start_hook("claude-code", hook_input("make b", call="t2"), running.socket)
        rows = wait_pending(running.store, 2)
        assert sorted(r["callId"] for r in rows) == ["t1", "t2"]
        for row in rows:
            verb = "allow" if row["callId"] == "t1" else "reject"
            assert broker("answer", str(running.store), row["id"], verb).returncode == 0
        assert decision(finish(first)[1])["permissionDecision"] == "allow"
        assert decision(finish(second)[1])["permissionDecision"] == "deny"
    sid = session_id_for("claude-code", "sess-1")
    events = log_events(running.store, sid)
    assert sum(e["type"] == "approval/asked" for e in events) == 2
    assert sum(e["type"] == "approval/decided" for e in events) == 2
    sessions = broker("log", "show", str(running.store)).stdout.splitlines()
    assert len(sessions) == 2  # the header and one session
    assert sessions[1].startswith(sid)


def test_an_agent_session_is_resumed_after_the_service_restarts(
    tmp_path: pathlib.Path, rules: pathlib.Path
) -> None:
    with service(tmp_path, "--rules", str(rules)) as running:
        assert hook("codex", hook_input("rm a"), running.socket)[0] == 0
    err = running.stop()
    assert "Traceback" not in err
    with service(tmp_path, "--rules", str(rules)) as again:
        assert hook("codex", hook_input("rm b"), again.socket)[0] == 0
    sid = session_id_for("codex", "sess-1")
    types = [e["type"] for e in log_events(again.store, sid)]
    assert types.count("turn/start") == 2
    assert types.count("approval/decided") == 2
    shown = broker("log", "show", str(again.store), sid)
    assert shown.returncode == 0
    assert "rejected" in shown.stdout
    assert broker("log", "verify", str(again.store)).returncode == 0


def test_the_socket_is_the_users_alone(tmp_path: pathlib.Path) -> None:
    with service(tmp_path) as running:
        assert stat.S_IMODE(running.socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(running.socket.parent.stat().st_mode) == 0o700
        # A second service on the same socket is refused by name.
        second = subprocess.run(
            [
                BROKER,
                "serve",
                "--store",
                str(tmp_path / "b.sqlite"),
                "--socket",
                str(running.socket),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert second.returncode == 2
        assert "another broker serve is listening on" in second.stderr


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a peer as another user")
def test_a_peer_of_another_user_is_refused_by_uid() -> None:
    # Outside pytest's tmp folders, which only root may enter.
    root = pathlib.Path(tempfile.mkdtemp(prefix="broker-uid-", dir="/tmp"))
    root.chmod(0o755)
    try:
        _refuses_another_uid(root)
    finally:
        shutil.rmtree(root)


def _refuses_another_uid(tmp_path: pathlib.Path) -> None:
    with service(tmp_path) as running:
        # Opened up after start, as a careless admin might: the uid check still holds.
        running.socket.parent.chmod(0o755)
        running.socket.chmod(0o666)
        client = (
            "import json, os, socket, sys; os.setgid(65534); os.setuid(65534); "
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
            "print(s.makefile().readline())"
        )
        done = subprocess.run(
            [sys.executable, "-c", client, str(running.socket)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert reply["outcome"] == "unavailable"
        assert reply["message"] == (
            "refused: uid 65534 is not the service's user; run the hook as uid 0"
        )
    listed = broker("log", "show", str(running.store))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "no sessions"  # refused before any session was opened


def test_the_board_shows_arguments_only_when_small_and_escaped() -> None:
    from broker._remote import shown_arguments
    from broker.inbox._wire import shown
    from broker.store import SHOWN_ARGUMENTS, PendingQuestion

    assert shown_arguments(None) is None
    assert shown_arguments({"command": "ls", "n": [1, {"a": None}]}) == {
        "command": "ls",
        "n": [1, {"a": None}],
    }
    assert shown_arguments({"content": "x" * SHOWN_ARGUMENTS}) is None  # too large to show
    question = PendingQuestion(
        id="q",
        session_id="s",
        agent="a",
        tool_name="Write",
        asked_at_ms=0,
        owner="o",
        arguments={"path\u202e": ["\x1b[2J", {"k": "v\u202e"}], "n": 3},
    )
    assert shown(question).arguments == {
        "path\\u202e": ["\\x1b[2J", {"k": "v\\u202e"}],
        "n": 3,
    }


def test_peers_that_break_the_protocol_do_not_stop_the_service(tmp_path: pathlib.Path) -> None:
    import socket

    with service(tmp_path) as running:
        frames = [
            b'{"v": 1, "agent": "claude-code"',  # then the peer goes away mid-line
            b"[" * 200_000 + b"\n",  # nested past what the parser can read
            b'{"v": 2}\n',
            b"\xff\xfe\n",
        ]
        replies = []
        for frame in frames:
            with socket.socket(socket.AF_UNIX) as peer:
                peer.connect(str(running.socket))
                peer.sendall(frame)
                if frame.endswith(b"\n"):
                    replies.append(json.loads(peer.makefile("rb").readline()))
        assert [r["outcome"] for r in replies] == ["unavailable"] * 3
        assert replies[0]["message"] == "refused: a question is nested too deeply to be read"
        assert replies[1]["message"].startswith("refused: v must be 1")
        # Still serving.
        status, out, _ = hook("codex", hook_input("rm x"), running.socket, "--timeout", "2")
        assert status == 0
        assert decision(out)["permissionDecision"] == "deny"
        assert running.process.poll() is None
    err = running.stop()
    assert "Traceback" not in err
