"""The decision engine: a :class:`RuleSet` decides a call by its rules, or leaves it to the
answerers.

Synopsis::

    rules = RuleSet(load_rules("rules.toml", Layer.PROJECT))
    verdict = rules.decide("bash", {"command": "git status && git diff"})
    verdict.decision      # RuleDecision.ALLOW when every part is allowed; None: ask a person
    verdict.rule.origin   # which rule decided (layer, file, index, text)
    verdict.parts         # for a command: which part matched which rule, or why none could

Order: a ``deny`` rule that covers the call (for a command: **any** of its parts, nested ones
included) wins; else an ``ask`` rule (the same way); else the call is allowed when an ``allow``
rule covers it — for a command, when the command parsed cleanly and **every** part is covered
by an allow rule (:mod:`._shell` says what never is: substitutions, redirections to files,
``bash -c``, ``eval``, leading assignments, what cannot be parsed). Among the rules of the
winning decision the strongest layer names the rule (managed, user, project, session), then
the order of the files.

Cost: the rules that name a tool are found once per tool name (cached), command rules are
indexed by their first word, so a decision reads a few rules whatever the number loaded.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._tool_names import tool_aliases
from .._vocabulary import Outcome
from ._model import Rule, RuleDecision
from ._shell import CommandPart, ParsedCommand, parse_command

__all__ = ["PartVerdict", "RuleSet", "Verdict", "command_of"]

_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
# Recently parsed command lines (a parsed command is an immutable value): an agent asks about
# the same commands again and again (a test run, a build). Small on purpose: a set of lines
# larger than it misses every time and costs only the parse it would have cost anyway.
_PARSED: dict[str, ParsedCommand] = {}
_PARSED_LIMIT = 256
_PARSED_LONGEST = 4096
_CACHE_LIMIT = 4096


@attrs.frozen(kw_only=True)
class PartVerdict:
    """One part of a command: the rule that decided it, or why no allow rule could."""

    text: str
    rule: Rule | None = None
    note: str | None = None


@attrs.frozen(kw_only=True)
class Verdict:
    """What the rules say of a call. ``decision`` is ``None`` when no rule decides it (the
    answerers are asked); ``rule`` the rule that decided (for an allowed command: the one that
    covered its first part); ``parts`` the command's parts, each with its rule or note."""

    decision: RuleDecision | None
    rule: Rule | None = None
    parts: tuple[PartVerdict, ...] = ()

    @property
    def outcome(self) -> Outcome | None:
        """``rejected`` for deny, ``allowed-once`` for allow, ``None`` for ask or no rule."""
        if self.decision is RuleDecision.DENY:
            return Outcome.REJECTED
        if self.decision is RuleDecision.ALLOW:
            return Outcome.ALLOWED_ONCE
        return None


NO_RULE = Verdict(decision=None)


def command_of(arguments: Mapping[str, Any] | None) -> ParsedCommand | None:
    """The command a call runs, parsed: its ``command`` argument as a shell line, or as an argv
    list (``["bash", "-lc", LINE]`` is LINE; any other list is one simple command, which no
    shell interprets). ``None`` when the call has no command."""
    if arguments is None:
        return None
    command = arguments.get("command")
    if isinstance(command, str):
        parsed = _PARSED.get(command)
        if parsed is None:
            parsed = parse_command(command)
            if len(command) > _PARSED_LONGEST:
                return parsed  # a model's megabyte line is not kept alive by the cache
            if len(_PARSED) >= _PARSED_LIMIT:
                _PARSED.clear()  # bounded; a working set larger than it is simply parsed
            _PARSED[command] = parsed
        return parsed
    if isinstance(command, list) and command and all(isinstance(w, str) for w in command):
        argv: tuple[str, ...] = tuple(command)
        program = argv[0].rsplit("/", 1)[-1]
        if (
            len(argv) == 3
            and program in _SHELLS
            and argv[1].startswith("-")
            and argv[1].endswith("c")
            and set(argv[1][1:]) <= {"l", "e", "c"}
        ):
            return parse_command(argv[2])
        return ParsedCommand(parts=(CommandPart(words=argv, text=shlex.join(argv)),))
    return None


@attrs.frozen
class _ToolView:
    """The rules that name one tool, by decision, strongest first; command rules by their
    first word."""

    plain: dict[RuleDecision, tuple[Rule, ...]]
    by_word: dict[RuleDecision, dict[str, tuple[Rule, ...]]]
    #: Whether any rule has a command (only then is the command parsed).
    commands: bool = attrs.field(init=False)
    #: Whether any deny or ask rule names this tool (else only allow rules are read).
    restricts: bool = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "commands", any(self.by_word.values()))
        restricts = any(
            self.plain[d] or self.by_word[d] for d in (RuleDecision.DENY, RuleDecision.ASK)
        )
        object.__setattr__(self, "restricts", restricts)

    @classmethod
    def of(cls, rules: Iterable[Rule]) -> _ToolView:
        plain: dict[RuleDecision, list[Rule]] = {d: [] for d in RuleDecision}
        by_word: dict[RuleDecision, dict[str, list[Rule]]] = {d: {} for d in RuleDecision}
        for rule in rules:
            if rule.command is None:
                plain[rule.decision].append(rule)
            else:
                by_word[rule.decision].setdefault(rule.command[0], []).append(rule)
        return cls(
            {d: tuple(r) for d, r in plain.items()},
            {d: {w: tuple(r) for w, r in m.items()} for d, m in by_word.items()},
        )


def _strength(rule: Rule) -> tuple[int, int]:
    return (rule.origin.layer.rank, rule.origin.index)


class RuleSet:
    """An immutable set of rules from any layers (module doc). Thread-safe to share."""

    __slots__ = ("_cache", "rules")

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        # Strongest layer first, then file order: the first match of a decision names it.
        self.rules: tuple[Rule, ...] = tuple(sorted(rules, key=_strength))
        self._cache: dict[str, _ToolView] = {}

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"<RuleSet {len(self.rules)} rules>"

    def __or__(self, other: RuleSet) -> RuleSet:
        return RuleSet((*self.rules, *other.rules))

    def _view(self, tool_name: str) -> _ToolView:
        view = self._cache.get(tool_name)
        if view is None:
            names = tool_aliases(tool_name)
            view = _ToolView.of(r for r in self.rules if r.covers_tool(names))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()  # bounded: many distinct tool names only cost a rebuild
            self._cache[tool_name] = view
        return view

    def decide(
        self,
        tool_name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        cwd: str | None = None,
        explain: bool = False,
    ) -> Verdict:
        """The rules' verdict on one call of *tool_name* with *arguments* (module doc).
        Relative path arguments are read against *cwd* when given. With *explain*, the
        verdict lists a command's parts with the rule of each (or why none); without, only
        what decides (the request algorithm's path). Never raises."""
        if not self.rules:
            return NO_RULE
        view = self._view(tool_name)
        parsed = command_of(arguments) if view.commands else None
        if view.restricts:
            for decision in (RuleDecision.DENY, RuleDecision.ASK):
                rule = self._first_covering(view, decision, parsed, arguments, cwd)
                if rule is not None:
                    parts = _parts_of(parsed, rule) if explain else ()
                    return Verdict(decision=decision, rule=rule, parts=parts)
        return self._allowed(view, parsed, arguments, cwd, explain)

    def _first_covering(
        self,
        view: _ToolView,
        decision: RuleDecision,
        parsed: ParsedCommand | None,
        arguments: Mapping[str, Any] | None,
        cwd: str | None,
    ) -> Rule | None:
        """The strongest deny (or ask) rule that covers the call: a plain one, or a command
        one that covers **any** part of the command, nested parts included."""
        plain = view.plain[decision]
        found = [r for r in plain if r.matches_args(arguments, cwd=cwd)] if plain else []
        index = view.by_word[decision]
        if parsed is not None and index:
            for part in parsed.parts:
                words = part.words
                if not words:
                    continue
                first = words[0]
                candidates = index.get(first, ())
                if "/" in first:  # /bin/rm: a deny or ask rule on rm covers it too
                    candidates += index.get(first.rsplit("/", 1)[-1], ())
                for rule in candidates:
                    if rule.matches_words(words) and rule.matches_args(arguments, cwd=cwd):
                        found.append(rule)
        if not found:
            return None
        return found[0] if len(found) == 1 else min(found, key=_strength)

    def _allowed(
        self,
        view: _ToolView,
        parsed: ParsedCommand | None,
        arguments: Mapping[str, Any] | None,
        cwd: str | None,
        explain: bool,
    ) -> Verdict:
        allow_plain = view.plain[RuleDecision.ALLOW]
        plain = (
            [r for r in allow_plain if r.matches_args(arguments, cwd=cwd)] if allow_plain else []
        )
        index = view.by_word[RuleDecision.ALLOW]
        if parsed is None or not index:
            if plain:
                return Verdict(decision=RuleDecision.ALLOW, rule=plain[0])
            return NO_RULE
        if plain:
            # A rule on the whole tool (or its arguments alone) needs no command to match.
            parts = self._allowed_parts(parsed, index, arguments, cwd) if explain else ()
            return Verdict(decision=RuleDecision.ALLOW, rule=plain[0], parts=parts)
        if not explain:
            first = self._covers_every_part(parsed, index, arguments, cwd)
            return NO_RULE if first is None else Verdict(decision=RuleDecision.ALLOW, rule=first)
        parts = self._allowed_parts(parsed, index, arguments, cwd)
        covered = [p.rule for p in parts if p.rule is not None]
        if parsed.allowable and parts and len(covered) == len(parts):
            return Verdict(decision=RuleDecision.ALLOW, rule=covered[0], parts=parts)
        return Verdict(decision=None, parts=parts)

    @staticmethod
    def _covers_every_part(
        parsed: ParsedCommand,
        index: dict[str, tuple[Rule, ...]],
        arguments: Mapping[str, Any] | None,
        cwd: str | None,
    ) -> Rule | None:
        """The allow rule of the first part when every top-level part is covered by one, the
        command parsed cleanly and nothing is opaque; else None."""
        if not parsed.allowable:
            return None
        first: Rule | None = None
        for part in parsed.parts:
            if part.nested:
                continue
            words = part.words
            for rule in index.get(words[0], ()):
                if rule.matches_words(words) and rule.matches_args(arguments, cwd=cwd):
                    break
            else:
                return None
            if first is None:
                first = rule
        return first

    def _allowed_parts(
        self,
        parsed: ParsedCommand,
        index: dict[str, tuple[Rule, ...]],
        arguments: Mapping[str, Any] | None,
        cwd: str | None,
    ) -> tuple[PartVerdict, ...]:
        if parsed.error is not None:
            return (PartVerdict(text="", note=f"cannot be parsed: {parsed.error}"),)
        verdicts: list[PartVerdict] = []
        for part in parsed.parts:
            if part.nested:
                continue
            if part.opaque is not None or not part.words:
                verdicts.append(PartVerdict(text=part.text, note=part.opaque or "no command"))
                continue
            for rule in index.get(part.words[0], ()):
                if rule.matches_words(part.words) and rule.matches_args(arguments, cwd=cwd):
                    verdicts.append(PartVerdict(text=part.text, rule=rule))
                    break
            else:
                verdicts.append(PartVerdict(text=part.text, note="no allow rule covers it"))
        return tuple(verdicts)


def _parts_of(parsed: ParsedCommand | None, rule: Rule) -> tuple[PartVerdict, ...]:
    """For a deny or ask verdict on a command: the parts the deciding rule covers."""
    if parsed is None or rule.command is None:
        return ()
    return tuple(
        PartVerdict(text=p.text, rule=rule)
        for p in parsed.parts
        if p.words and rule.matches_words(p.words)
    )
