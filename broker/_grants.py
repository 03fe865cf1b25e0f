"""Grants as rules: a grant with an id is an allow rule of the session layer.

Synopsis::

    grant = new_grant("bash", command="git status", by="alice", now_ms=..., expires_in=1800)
    grant_allowing([grant], "bash", {"command": "git status -s"})     # grant
    grant_allowing([grant], "bash", {"command": "git status; rm x"})  # None: a part uncovered
    propose_command("git commit -m 'x' && rm -rf /")                   # "git commit"

A grant on a command covers what an allow rule with that prefix covers (every part of a
compound command, nothing opaque); a grant without one covers the whole tool — which only a
person who chose exactly that should give (:func:`propose_command` never proposes it).
"""

from __future__ import annotations

import functools
import secrets
from typing import TYPE_CHECKING, Any, Literal

from ._projection import Grant
from .rules import Layer, Rule, RuleDecision, RuleOrigin, RuleSet, parse_command, split_words

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._request import ApprovalRequest

__all__ = [
    "INTERPRETERS",
    "NEEDS_SUBCOMMAND",
    "GrantScope",
    "always_offer",
    "always_proposal",
    "grant_allowing",
    "grant_rule",
    "new_grant",
    "propose_command",
]

#: Where an "always" answer is remembered: this session (a grant), or also the project's rules
#: file (a rule every later session loads).
GrantScope = Literal["session", "project"]

#: Programs that run whatever they are given: a prefix of one alone would allow anything.
INTERPRETERS = frozenset(
    {
        "bash", "sh", "zsh", "dash", "ksh", "fish", "csh", "tcsh", "python", "python3",
        "python2", "node", "deno", "bun", "perl", "ruby", "php", "lua", "env", "sudo", "doas",
        "eval", "exec", "xargs", "nohup", "timeout", "nice", "time", "command", "busybox",
        "npx", "uvx", "pipx", "docker", "kubectl", "ssh", "su", "osascript", "powershell",
        "pwsh", "awk", "gawk", "sed", "find",
        # Not interpreters, but a grant of the program alone would cover its worst uses.
        "rm", "dd", "mkfs", "shred", "chmod", "chown", "curl", "wget", "nc", "ncat", "scp",
        "rsync",
    }
)  # fmt: skip
#: Programs proposed only with their subcommand: ``git status``, never ``git`` alone (which
#: would cover ``git push --force``).
NEEDS_SUBCOMMAND = frozenset({"git", "npm", "pnpm", "yarn", "cargo", "go", "make", "gh", "pip"})


def new_grant(
    tool_name: str,
    *,
    command: str | None,
    by: str | None,
    now_ms: int,
    expires_in: float | None,
    rule_file: str | None = None,
) -> Grant:
    """A grant with a fresh id (``g-`` and 16 hex digits). *command* must be one simple
    command (a prefix), *expires_in* a positive number of seconds or None; *rule_file* the
    project rules file it was also remembered in."""
    if not isinstance(tool_name, str) or not tool_name.strip():
        raise ValueError(
            f"tool_name must be a non-empty string, got {tool_name!r}: name the tool the "
            "grant covers"
        )
    if command is not None and split_words(command) is None:
        raise ValueError(
            f"command must be one simple command (a program and its first words), got "
            f"{command!r}: grant a prefix such as 'git status'"
        )
    expires_at_ms = None
    if expires_in is not None:
        if not isinstance(expires_in, int | float) or not 0 < expires_in < 10**9:
            raise ValueError(
                f"expires_in must be a positive number of seconds, got {expires_in!r}: "
                "e.g. 1800 for 30 minutes, or None for as long as the session"
            )
        expires_at_ms = now_ms + int(expires_in * 1000)
    return Grant(
        id=f"g-{secrets.token_hex(8)}",
        tool_name=tool_name,
        command=command,
        by=by,
        at_ms=now_ms,
        expires_at_ms=expires_at_ms,
        rule_file=rule_file,
    )


def grant_rule(grant: Grant, index: int = 1) -> Rule:
    """*grant* as the allow rule of the session layer it is."""
    words = split_words(grant.command) if grant.command is not None else None
    shown = f" command {grant.command!r}" if grant.command is not None else ""
    return Rule.build(
        decision=RuleDecision.ALLOW,
        tools=(grant.tool_name,),
        command=words,
        origin=RuleOrigin(
            layer=Layer.SESSION, index=index, text=f"grant {grant.id}: {grant.tool_name}{shown}"
        ),
    )


def grant_allowing(
    grants: Iterable[Grant], tool_name: str, arguments: Mapping[str, Any] | None
) -> Grant | None:
    """The first of *grants* that allows this call (a grant on a command: as an allow rule
    with that prefix), or None."""
    held = tuple(grants)
    if not held:
        return None
    rules, by_rule = _as_rules(held)
    verdict = rules.decide(tool_name, arguments)
    if verdict.decision is not RuleDecision.ALLOW or verdict.rule is None:
        return None
    return by_rule[verdict.rule]


def always_proposal(req: ApprovalRequest) -> str | None:
    """What "always allow" would remember for *req*: for a call with a ``command`` argument,
    the prefix :func:`propose_command` proposes (None: nothing can be remembered, so "always"
    is not offered); for any other call, None as well — the grant is then of the tool itself
    (an MCP tool of its server), and *the tool* is what "always" says it remembers."""
    arguments = req.arguments
    if arguments is not None and "command" in arguments:
        return propose_command(arguments["command"])
    return None


def always_offer(req: ApprovalRequest) -> str | None:
    """The rule "always allow" proposes for *req*, as shown to the person before they accept
    it (``bash: git status``, ``write_note``), or None when it cannot be offered (a command
    with no safe prefix: only "once" can be answered)."""
    arguments = req.arguments
    if arguments is not None and "command" in arguments:
        proposal = propose_command(arguments["command"])
        return None if proposal is None else f"{req.tool_name}: {proposal}"
    return req.tool_name


@functools.lru_cache(maxsize=256)
def _as_rules(grants: tuple[Grant, ...]) -> tuple[RuleSet, dict[Rule, Grant]]:
    """*grants* as a rule set, made once per set of grants (not on every question they decide):
    grants are values, so the same grants give the same rules."""
    by_rule = {grant_rule(grant, n): grant for n, grant in enumerate(grants, start=1)}
    return RuleSet(by_rule), by_rule


def propose_command(command: object) -> str | None:
    """The prefix "remember this" proposes for a shell command: its program and subcommand
    (``git commit``; the program alone when the second word is an option or a path), never a
    whole line, never an interpreter (``bash``, ``python``, ``sudo``…). None when nothing can
    be proposed: the command is not one clean simple command of a known shape."""
    if isinstance(command, list) and all(isinstance(w, str) for w in command):
        words: tuple[str, ...] | None = tuple(command)
    elif isinstance(command, str):
        parsed = parse_command(command)
        top = [p for p in parsed.parts if not p.nested]
        words = top[0].words if parsed.allowable and len(top) == 1 else None
    else:
        words = None
    if not words or not all(w.isascii() and w.isprintable() for w in words[:2]):
        return None  # a rule a person approves must read as what it is: plain ASCII words
    program = words[0]
    if "/" in program or program in INTERPRETERS or program.startswith("-"):
        return None
    second = words[1] if len(words) > 1 else None
    plain = (
        second is not None
        and not second.startswith("-")
        and second.replace("-", "").replace("_", "").replace(":", "").isalnum()
    )
    if plain:
        return f"{program} {second}"
    return None if program in NEEDS_SUBCOMMAND else program
