"""Run the real OpenAI Codex CLI (``codex exec``) offline against a scripted model.

The binary is the npm package pinned in ``tests/agents/codex/package.json`` (install with
``npm ci --prefix tests/agents/codex``). Every run gets scratch directories of its own, next
to *workdir*::

    <scratch>/codex-home   CODEX_HOME: config.toml (model provider → the scripted server,
                           analytics off, update check off) and hooks.json
    <scratch>/home         HOME
    <scratch>/tmp          TMPDIR (outside CODEX_HOME)

and a clean environment (``PATH``, ``HOME``, ``CODEX_HOME``, ``TMPDIR``, the fake API key),
so nothing of the developer's own Codex setup leaks in. Hooks are user-layer hooks
(``$CODEX_HOME/hooks.json``). Codex runs only *trusted* hooks and skips the others silently,
so by default (``hook_trust="config"``) the run records each hook as trusted the way Codex's
own ``/hooks`` review does: ``[hooks.state."<hooks.json path>:<event>:<group>:<handler>"]
trusted_hash = "sha256:…"`` in ``config.toml`` (:func:`hook_trust_state`).
``hook_trust="bypass"`` passes ``--dangerously-bypass-hook-trust`` instead, ``"none"`` does
neither (the hooks must then not run). See ``design/agent-hooks-codex.md``.

The default policy is ``approval_policy = "never"`` with ``sandbox_mode =
"danger-full-access"``: PreToolUse hooks run for every shell call and nothing can ask for
approval. ``codex exec`` forces ``approval_policy`` to ``never`` whatever the config says,
except with ``--approve-for-me`` (``approve_for_me=True``): workspace-write sandbox, approval
on request, approvals routed to the automatic reviewer, and PermissionRequest hooks run
before it for a call that asks for approval (``sandbox_permissions: "require_escalated"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .model_api_openai import ScriptedResponses

__all__ = [
    "CODEX_BIN",
    "MODEL",
    "CompletedRun",
    "codex_available",
    "hook_command",
    "hook_trust_state",
    "run_codex",
]

CODEX_DIR = Path(__file__).parent / "codex"
CODEX_BIN = CODEX_DIR / "node_modules" / ".bin" / "codex"
# A model in the binary's bundled catalog (no "model metadata not found" warning); its
# shell tool is unified exec (``exec_command``).
MODEL = "gpt-5.5"
API_KEY_ENV = "BROKER_SCRIPTED_OPENAI_KEY"


def codex_available() -> bool:
    return CODEX_BIN.exists()


@dataclass(frozen=True)
class CompletedRun:
    """What one ``codex exec`` run did."""

    returncode: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]  # the ``--json`` JSONL event stream from stdout
    codex_home: Path
    seconds: float

    def items(self, item_type: str) -> list[dict[str, Any]]:
        """Completed items of *item_type* (``"command_execution"``, ``"agent_message"``...)."""
        found = []
        for event in self.events:
            item = event.get("item")
            if (
                event.get("type") == "item.completed"
                and isinstance(item, dict)
                and item.get("type") == item_type
            ):
                found.append(item)
        return found

    @property
    def final_message(self) -> str | None:
        """The text of the last ``agent_message`` item, if any."""
        messages = self.items("agent_message")
        text = messages[-1].get("text") if messages else None
        return text if isinstance(text, str) else None

    @property
    def thread_id(self) -> str | None:
        for event in self.events:
            if event.get("type") == "thread.started":
                value = event.get("thread_id")
                return value if isinstance(value, str) else None
        return None


def hook_command(*argv: str | Path) -> str:
    """A hook ``command`` string (run by Codex with ``$SHELL -lc``) for *argv*."""
    return " ".join(_quote(str(arg)) for arg in argv)


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\"'\"'") + "'"


# Codex's snake_case labels for the events it hashes and keys hook state by.
_EVENT_LABELS = {
    "PreToolUse": "pre_tool_use",
    "PermissionRequest": "permission_request",
    "PostToolUse": "post_tool_use",
    "SessionStart": "session_start",
    "UserPromptSubmit": "user_prompt_submit",
    "Stop": "stop",
}
_MATCHER_EVENTS = {"PreToolUse", "PermissionRequest", "PostToolUse", "SessionStart"}


def hook_trust_state(hooks_json: Path, hooks: Mapping[str, Any]) -> dict[str, str]:
    """``hooks.state`` key → ``trusted_hash`` for every command hook in *hooks*.

    Codex 0.171 trusts a hook when ``config.toml`` holds, under the key
    ``<absolute hooks.json path>:<event label>:<group index>:<handler index>``, the hash
    ``"sha256:" + sha256(canonical JSON of {"event_name": <label>, "matcher"?: …, "hooks":
    [<handler normalised: type, command, timeout (default 600), async (default false),
    statusMessage if set>]})`` (keys sorted, no whitespace). Checked against the real binary
    by ``test_hook_trust_by_config_state``.
    """
    state: dict[str, str] = {}
    for event, groups in hooks.get("hooks", {}).items():
        label = _EVENT_LABELS[event]
        for group_index, group in enumerate(groups):
            for handler_index, handler in enumerate(group["hooks"]):
                normalised: dict[str, Any] = {
                    "type": "command",
                    "command": handler["command"],
                    "timeout": max(1, int(handler.get("timeout", 600))),
                    "async": bool(handler.get("async", False)),
                }
                if handler.get("statusMessage") is not None:
                    normalised["statusMessage"] = handler["statusMessage"]
                identity: dict[str, Any] = {"event_name": label, "hooks": [normalised]}
                if event in _MATCHER_EVENTS and group.get("matcher") is not None:
                    identity["matcher"] = group["matcher"]
                canonical = json.dumps(
                    identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False
                )
                digest = hashlib.sha256(canonical.encode()).hexdigest()
                key = f"{hooks_json}:{label}:{group_index}:{handler_index}"
                state[key] = f"sha256:{digest}"
    return state


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _config_toml(
    api: ScriptedResponses, approval_policy: str, sandbox_mode: str, config_extra: str
) -> str:
    return "\n".join(
        [
            f"model = {_toml_str(MODEL)}",
            'model_provider = "scripted"',
            f"approval_policy = {_toml_str(approval_policy)}",
            f"sandbox_mode = {_toml_str(sandbox_mode)}",
            "check_for_update_on_startup = false",
            'web_search = "disabled"',
            "",
            "# config_extra",
            config_extra,
            "",
            "[model_providers.scripted]",
            'name = "scripted"',
            f"base_url = {_toml_str(api.base_url)}",
            'wire_api = "responses"',
            f"env_key = {_toml_str(API_KEY_ENV)}",
            "request_max_retries = 0",
            "stream_max_retries = 0",
            "stream_idle_timeout_ms = 30000",
            "",
            "[analytics]",
            "enabled = false",
            "",
            "[feedback]",
            "enabled = false",
            "",
        ]
    )


def run_codex(
    workdir: Path,
    *,
    api: ScriptedResponses,
    hooks: Mapping[str, Any] | None = None,
    config_extra: str = "",
    prompt: str = "Run the scripted command.",
    timeout: float = 60,
    approval_policy: str = "never",
    sandbox_mode: str = "danger-full-access",
    hook_trust: Literal["config", "bypass", "none"] = "config",
    approve_for_me: bool = False,
    extra_args: Sequence[str] = (),
) -> CompletedRun:
    """Run ``codex exec --json`` once in *workdir* against *api*; see the module docstring.

    *hooks* is the content of ``hooks.json`` (``{"hooks": {"PreToolUse": [...]}}``).
    *config_extra* is TOML inserted into ``config.toml`` after the harness's own top-level
    keys (``model``, ``model_provider``, ``approval_policy``, ``sandbox_mode``,
    ``check_for_update_on_startup``, ``web_search``; set the policies through the keyword
    arguments, a repeated key is a TOML error) and before its tables.
    """
    if not codex_available():
        raise FileNotFoundError(f"{CODEX_BIN} (run: npm ci --prefix {CODEX_DIR})")
    scratch = Path(tempfile.mkdtemp(prefix="codex-run-", dir=workdir.parent))
    codex_home, home, tmp = scratch / "codex-home", scratch / "home", scratch / "tmp"
    for path in (codex_home, home, tmp):
        path.mkdir()
    config = _config_toml(api, approval_policy, sandbox_mode, config_extra)
    if hooks is not None:
        hooks_json = codex_home / "hooks.json"
        hooks_json.write_text(json.dumps(hooks, indent=2))
        if hook_trust == "config":
            for key, digest in hook_trust_state(hooks_json, hooks).items():
                config += f"\n[hooks.state.{_toml_str(key)}]\ntrusted_hash = {_toml_str(digest)}\n"
    (codex_home / "config.toml").write_text(config)
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        "TMPDIR": str(tmp),
        "SHELL": shutil.which("bash") or "/bin/sh",
        "LANG": "C.UTF-8",
        API_KEY_ENV: "sk-scripted-not-a-real-key",
    }
    argv = [
        str(CODEX_BIN),
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-C",
        str(workdir),
    ]
    if hook_trust == "bypass":
        argv.append("--dangerously-bypass-hook-trust")
    if approve_for_me:
        argv.append("--approve-for-me")
    argv += [*extra_args, prompt]
    started = time.monotonic()
    proc = subprocess.run(
        argv,
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    events = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return CompletedRun(proc.returncode, proc.stdout, proc.stderr, events, codex_home, seconds)
