"""Rules files: the broker's TOML, the MCP gate's older lists, and Claude Code's settings.

Synopsis::

    # .broker/rules.toml
    [[rules]]
    decision = "allow"          # allow | ask | deny
    tool = "bash"               # a glob on the tool name (MCP tools: their own names)
    command = "git status"      # bash-like tools: a command prefix, matched word by word
    examples = ["git status", "git status --short"]          # must be covered (checked here)
    counterexamples = ["git status; rm -rf /", "git push"]   # must not be

    [[rules]]
    decision = "deny"
    tool = "write_*"
    reason = "system files are not ours to write"   # optional: shown with the denial
    [rules.args]
    path = "/etc/**"            # a glob on one argument (a path argument is normalised first)

    rules = load_rules(".broker/rules.toml", Layer.PROJECT)

The MCP gate's files (``allow = ["read_*"]``, ``deny = [...]``: tool-name globs) load as rules
of the same meaning, and so does a Claude Code settings file's ``permissions`` (``allow``,
``ask``, ``deny`` lists of ``Bash(npm run test:*)``, ``Read(~/.ssh/**)``, ``mcp__srv__tool``…).

A file with any problem — not TOML or JSON, an unknown key, a bad glob, a command that is not
one simple command, an example the rule does not cover or a counterexample it does — is
refused whole: :class:`RulesFileError` lists every problem, one line each, naming the file
and the rule. A managed file must be owned by root and writable by no one else.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import stat
import tomllib
from collections.abc import Iterable
from typing import Any

from .._errors import BrokerError
from ._engine import RuleSet
from ._glob import GlobError
from ._model import ANY_PATH, URL_DOMAIN, Layer, Rule, RuleDecision, RuleOrigin
from ._shell import split_words

__all__ = [
    "RulesFileError",
    "claude_code_permissions",
    "load_rules",
    "parse_rules",
    "rules_from_claude_code",
]

_RULE_KEYS = (
    "decision",
    "tool",
    "command",
    "args",
    "examples",
    "counterexamples",
    "reason",
    "approvers",
    "quorum",
)
#: Who a rule's ``approvers`` may name: a person, ``group:NAME`` or an OS user ``uid:NAME``.
_APPROVER = re.compile(r"(?:(?:group|uid):)?[a-z0-9][a-z0-9._-]{0,63}")
_TOP_KEYS = ("rules", "allow", "ask", "deny")
_CLAUDE_PERMISSION_KEYS = ("allow", "ask", "deny")
# What Claude Code's permissions object may hold besides the lists (not rules: not read).
_CLAUDE_OTHER_KEYS = frozenset(
    {"defaultMode", "additionalDirectories", "disableBypassPermissionsMode"}
)
_CLAUDE_PATH_TOOLS = {
    "Read": ("Read", "Glob", "Grep", "LS"),
    "Edit": ("Edit", "MultiEdit", "Write", "NotebookEdit"),
    "Write": ("Write",),
    "MultiEdit": ("MultiEdit",),
    "NotebookEdit": ("NotebookEdit",),
    "Glob": ("Glob",),
    "Grep": ("Grep",),
    "LS": ("LS",),
}


class RulesFileError(BrokerError, ValueError):
    """A rules file that is refused; ``problems`` holds one line per problem (the message is
    all of them, one per line)."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems))


def load_rules(
    path: str | os.PathLike[str], layer: Layer | str = Layer.PROJECT
) -> tuple[Rule, ...]:
    """The rules of one file, as *layer* (a ``.json`` file is read as Claude Code settings,
    anything else as the broker's TOML). Raises :class:`RulesFileError` listing every
    problem. Blocking file I/O: call it at start-up (or through ``trio.to_thread``)."""
    where = os.fspath(path)
    level = _parse_layer(layer)
    file = pathlib.Path(where)
    try:
        if level is Layer.MANAGED:
            _check_managed(file, where)
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RulesFileError(
            [f"rules file {where}: cannot read it ({exc.strerror}): check the path"]
        ) from None
    except UnicodeDecodeError as exc:
        raise RulesFileError(
            [f"rules file {where}: not UTF-8 ({exc.reason}): fix the file"]
        ) from None
    if file.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RulesFileError(
                [f"rules file {where}: not JSON ({exc.msg} at line {exc.lineno}): fix the file"]
            ) from None
        if not isinstance(data, dict):
            raise RulesFileError([f"rules file {where}: a settings file is a JSON object"])
        return rules_from_claude_code(
            data.get("permissions", {}), where=where, layer=level, base=_project_root(file)
        )
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RulesFileError([f"rules file {where}: not TOML ({exc}): fix the file"]) from None
    return parse_rules(data, where=where, layer=level)


def _parse_layer(layer: object) -> Layer:
    if isinstance(layer, str) and layer in Layer.__members__.values():
        return Layer(layer)
    names = ", ".join(repr(str(x)) for x in Layer)
    raise ValueError(f"layer must be one of {names}, got {layer!r}")


def _check_managed(file: pathlib.Path, where: str) -> None:
    info = file.stat()
    if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise RulesFileError(
            [
                f"rules file {where}: a managed rules file must be owned by root and writable "
                f"by no one else: run chown root {where} && chmod go-w {where}"
            ]
        )


def _project_root(file: pathlib.Path) -> str:
    parent = file.resolve().parent
    return str(parent.parent if parent.name == ".claude" else parent)


# -- the broker's TOML ----------------------------------------------------------------------


def parse_rules(data: dict[str, Any], *, where: str, layer: Layer) -> tuple[Rule, ...]:
    """The rules of a parsed TOML document (module doc); :class:`RulesFileError` lists every
    problem."""
    problems: list[str] = []
    head = f"rules file {where}"
    for key in data:
        if key not in _TOP_KEYS:
            problems.append(
                f"{head}: unknown key {key!r}: write [[rules]] tables "
                "(or allow/deny lists of tool names)"
            )
    rules: list[Rule] = []
    tables = data.get("rules", [])
    if not isinstance(tables, list):
        problems.append(f"{head}: rules must be an array of tables: write [[rules]]")
        tables = []
    for n, table in enumerate(tables, start=1):
        rule = _rule_from_table(table, f"{head}: rule {n}", where, layer, n, problems)
        if rule is not None:
            rules.append(rule)
    index = len(tables)
    for key in ("deny", "ask", "allow"):
        names = data.get(key, [])
        if not isinstance(names, list) or not all(isinstance(p, str) and p for p in names):
            problems.append(
                f"{head}: {key} must be a list of non-empty tool-name patterns, got {names!r}: "
                f'write {key} = ["read_*"]'
            )
            continue
        for pattern in names:
            index += 1
            origin = RuleOrigin(layer=layer, file=where, index=index, text=f"{key} = [{pattern!r}]")
            try:
                rules.append(
                    Rule.build(decision=RuleDecision(key), tools=(pattern,), origin=origin)
                )
            except GlobError as exc:
                problems.append(f"{head}: {key} pattern {pattern!r}: {exc}")
    if problems:
        raise RulesFileError(problems)
    return tuple(rules)


def _rule_from_table(
    table: object, head: str, where: str, layer: Layer, n: int, problems: list[str]
) -> Rule | None:
    if not isinstance(table, dict):
        problems.append(f"{head}: must be a table: write [[rules]] with decision and tool")
        return None
    before = len(problems)
    for key in table:
        if key not in _RULE_KEYS:
            known = ", ".join(_RULE_KEYS)
            problems.append(f"{head}: unknown key {key!r}: a rule has {known}")
    decision_text = table.get("decision")
    if decision_text not in ("allow", "ask", "deny"):
        problems.append(f'{head}: decision must be "allow", "ask" or "deny", got {decision_text!r}')
    tool = table.get("tool")
    if not isinstance(tool, str) or not tool:
        problems.append(
            f'{head}: tool must be a glob on the tool name, got {tool!r}: write tool = "bash"'
        )
    command: tuple[str, ...] | None = None
    if "command" in table:
        text = table["command"]
        command = split_words(text) if isinstance(text, str) else None
        if command is None:
            problems.append(
                f"{head}: command must be one simple command (a program and its first words, "
                f"no operators, substitutions or redirections), got {text!r}"
            )
    args = table.get("args", {})
    if not isinstance(args, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in args.items()
    ):
        problems.append(f'{head}: args must be a table of argument globs: write path = "/etc/**"')
        args = {}
    reason = table.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        problems.append(f"{head}: reason must be a non-empty string")
    approvers = _approvers(table, decision_text, head, problems)
    quorum = _quorum(table, decision_text, approvers, head, problems)
    if len(problems) > before:
        return None
    assert isinstance(tool, str)
    assert isinstance(decision_text, str)
    origin = RuleOrigin(layer=layer, file=where, index=n, text=_as_written(table))
    try:
        rule = Rule.build(
            decision=RuleDecision(decision_text),
            tools=(tool,),
            command=command,
            args=args,
            origin=origin,
            reason=reason,
            approvers=approvers,
            quorum=quorum,
        )
    except GlobError as exc:
        problems.append(f"{head}: {exc}")
        return None
    _check_examples(rule, table, head, problems)
    return None if len(problems) > before else rule


def _approvers(
    table: dict[str, Any], decision: object, head: str, problems: list[str]
) -> tuple[str, ...]:
    """The rule's ``approvers``: who alone may answer the questions it sends to people."""
    if "approvers" not in table:
        return ()
    given = table["approvers"]
    if decision != "ask":
        problems.append(
            f"{head}: approvers name who answers a question, so only an ask rule has them: "
            'write decision = "ask"'
        )
        return ()
    if (
        not isinstance(given, list)
        or not given
        or not all(isinstance(a, str) and _APPROVER.fullmatch(a) for a in given)
    ):
        problems.append(
            f"{head}: approvers must be a non-empty list of people (alice), groups "
            f'(group:ops) or OS users (uid:root), got {given!r}: write approvers = ["alice", '
            '"group:ops"]'
        )
        return ()
    return tuple(dict.fromkeys(given))


#: The most approvals a rule may ask for (a quorum beyond this is a typo, not a policy).
MAX_QUORUM = 9


def _quorum(
    table: dict[str, Any],
    decision: object,
    approvers: tuple[str, ...],
    head: str,
    problems: list[str],
) -> int:
    """The rule's ``quorum``: how many different approvers must allow its questions."""
    if "quorum" not in table:
        return 1
    given = table["quorum"]
    if decision != "ask":
        problems.append(
            f"{head}: quorum counts the people who allow a question, so only an ask rule has "
            'one: write decision = "ask"'
        )
        return 1
    if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= MAX_QUORUM:
        problems.append(
            f"{head}: quorum must be a whole number from 1 to {MAX_QUORUM}, got {given!r}: "
            "write quorum = 2 for two-person approval"
        )
        return 1
    if given > 1 and not approvers:
        problems.append(
            f"{head}: quorum = {given} needs approvers to count: name who may allow, e.g. "
            'approvers = ["group:ops"]'
        )
        return 1
    named = [a for a in approvers if not a.startswith("group:")]
    if given > 1 and len(named) == len(approvers) and len(named) < given:
        problems.append(
            f"{head}: quorum = {given} can never be met by {len(named)} approver(s) "
            f"{named}: name more people, or a group"
        )
        return 1
    return given


def _as_written(table: dict[str, Any]) -> str:
    """The rule on one line, as a TOML inline table (examples left out)."""
    shown = {k: v for k, v in table.items() if k not in ("examples", "counterexamples")}
    return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in shown.items()) + "}"


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _check_examples(rule: Rule, table: dict[str, Any], head: str, problems: list[str]) -> None:
    single = RuleSet((rule,))
    tool = _a_tool_name(rule)
    for key, must in (("examples", True), ("counterexamples", False)):
        examples = table.get(key, [])
        if not isinstance(examples, list):
            problems.append(f"{head}: {key} must be a list")
            continue
        for example in examples:
            arguments = _example_arguments(rule, example)
            if arguments is None:
                problems.append(
                    f"{head}: {key} entry {example!r} must be a command (for a rule with "
                    "command) or a table of arguments"
                )
                continue
            covered = single.decide(tool, arguments).decision is rule.decision
            if covered and not must:
                problems.append(f"{head}: counterexample {example!r} is covered by the rule")
            elif must and not covered:
                problems.append(f"{head}: example {example!r} is not covered by the rule")


def _a_tool_name(rule: Rule) -> str:
    """A tool name the rule's first tool glob matches (its text without wildcards)."""
    name = "".join(c for c in rule.tools[0] if c not in "*?[]!") or "tool"
    return name if rule.covers_tool((name,)) else rule.tools[0]


def _example_arguments(rule: Rule, example: object) -> dict[str, Any] | None:
    if isinstance(example, str):
        return {"command": example} if rule.command is not None else None
    if isinstance(example, dict):
        return example
    return None


# -- Claude Code's permissions --------------------------------------------------------------


def claude_code_permissions(
    path: str | os.PathLike[str], layer: Layer = Layer.PROJECT
) -> tuple[Rule, ...]:
    """The rules of a Claude Code settings file's ``permissions`` (none when it has none),
    whatever the file's name: the hook bridge's settings file. :class:`RulesFileError` when
    the file or its permissions cannot be read."""
    where = os.fspath(path)
    file = pathlib.Path(where)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RulesFileError([f"rules file {where}: cannot be read as JSON ({exc})"]) from None
    if not isinstance(data, dict) or "permissions" not in data:
        return ()
    return rules_from_claude_code(
        data["permissions"], where=where, layer=layer, base=_project_root(file)
    )


def rules_from_claude_code(
    permissions: object, *, where: str, layer: Layer, base: str | None = None
) -> tuple[Rule, ...]:
    """The rules of a Claude Code settings file's ``permissions`` object, with the meaning
    Claude Code gives them. *base* is the project folder a ``/path`` pattern is relative to.
    Raises :class:`RulesFileError` for an entry this broker cannot read as Claude Code does."""
    head = f"rules file {where}"
    if not isinstance(permissions, dict):
        raise RulesFileError([f"{head}: permissions must be an object of allow/ask/deny lists"])
    problems: list[str] = []
    for key in permissions:
        if key not in _CLAUDE_PERMISSION_KEYS and key not in _CLAUDE_OTHER_KEYS:
            problems.append(
                f"{head}: permissions.{key} is not a permission list (allow, ask, deny)"
            )
    rules: list[Rule] = []
    index = 0
    for key in ("deny", "ask", "allow"):
        entries = permissions.get(key, [])
        if not isinstance(entries, list):
            problems.append(f"{head}: permissions.{key} must be a list of rules")
            continue
        for entry in entries:
            index += 1
            rule_head = f"{head}: permissions.{key} entry {entry!r}"
            if not isinstance(entry, str) or not entry.strip():
                problems.append(f"{rule_head}: must be a non-empty string such as Bash(git diff:*)")
                continue
            origin = RuleOrigin(layer=layer, file=where, index=index, text=entry)
            try:
                rules.append(_claude_rule(entry.strip(), RuleDecision(key), origin, base))
            except (ValueError, GlobError) as exc:
                problems.append(f"{rule_head}: {exc}")
    if problems:
        raise RulesFileError(problems)
    return tuple(rules)


def _claude_rule(entry: str, decision: RuleDecision, origin: RuleOrigin, base: str | None) -> Rule:
    name, paren, rest = entry.partition("(")
    if not paren:
        if name.startswith("mcp__") and name.count("__") == 1:
            name += "__*"  # mcp__server: every tool of that server
        return Rule.build(decision=decision, tools=(name,), origin=origin)
    if not rest.endswith(")"):
        raise ValueError("unbalanced parenthesis: write Tool(specifier)")
    spec = rest[:-1]
    if spec in ("", "*"):
        return Rule.build(decision=decision, tools=(name,), origin=origin)
    if name == "Bash":
        return _claude_bash(spec, decision, origin)
    if name in _CLAUDE_PATH_TOOLS:
        pattern = _claude_path(spec, base)
        return Rule.build(
            decision=decision,
            tools=_CLAUDE_PATH_TOOLS[name],
            args={ANY_PATH: pattern},
            origin=origin,
        )
    if name == "WebFetch" and spec.startswith("domain:"):
        return Rule.build(
            decision=decision, tools=(name,), args={URL_DOMAIN: spec[7:]}, origin=origin
        )
    raise ValueError(
        f"{name}({spec}) is not a form this broker reads: use Bash(prefix:*), Read(path), "
        "Edit(path), WebFetch(domain:host), mcp__server__tool or a bare tool name"
    )


def _claude_bash(spec: str, decision: RuleDecision, origin: RuleOrigin) -> Rule:
    exact = True
    text = spec
    if text.endswith(":*") or text.endswith(" *"):
        text, exact = text[:-2], False
    words = split_words(text)
    if words is None or any(c in text for c in "*?"):
        raise ValueError(
            "only a command prefix (Bash(npm run test:*)) or an exact command (Bash(npm run "
            "build)) can be read: wildcards inside a command are not"
        )
    return Rule.build(decision=decision, tools=("Bash",), command=words, exact=exact, origin=origin)


def _claude_path(spec: str, base: str | None) -> str:
    """Claude Code's path specifiers: ``//abs``, ``~/home``, ``/project-relative``,
    ``relative`` (to the working folder; a bare name matches at any depth, as gitignore)."""
    if spec.startswith("//"):
        return spec[1:]
    if spec.startswith("~/") or spec == "~":
        return spec
    if spec.startswith("/"):
        if base is None:
            raise ValueError("a /path is relative to the project: load the file from its place")
        return base.rstrip("/") + spec
    relative = spec[2:] if spec.startswith("./") else spec
    return relative if "/" in relative.rstrip("/") else "**/" + relative
