"""One permission rule: what it decides, which calls it covers, and where it was written.

Synopsis::

    rule = Rule.build(
        decision=RuleDecision.ALLOW,
        tools=("bash",),
        command=("git", "status"),
        origin=RuleOrigin(layer=Layer.PROJECT, file=".broker/rules.toml", index=1,
                          text='tool = "bash", command = "git status"'),
    )

A rule covers a call when one of its tool globs matches the tool's name (or the other name
of the same tool, ``bash``/``Bash``), each of its argument globs matches, and — for a rule
with a ``command`` — the command's words begin with the rule's words (:mod:`._engine` decides
which parts of a compound command must match). Rules are values: built once, at load, with
their globs compiled; a bad glob raises :class:`~._glob.GlobError` there.
"""

from __future__ import annotations

import enum
import re
import urllib.parse
from typing import TYPE_CHECKING, Any

import attrs

from ._glob import name_glob, path_glob
from ._paths import is_path_key, normalise_path

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ANY_PATH", "URL_DOMAIN", "ArgGlob", "Layer", "Rule", "RuleDecision", "RuleOrigin"]

#: The argument key of a glob on "the tool's path argument", whatever it is named (Claude
#: Code's ``Read(path)`` and ``Edit(path)``).
ANY_PATH = "*path"
#: The argument key of a glob on the host of the tool's ``url`` (Claude Code's
#: ``WebFetch(domain:example.com)``).
URL_DOMAIN = "*domain"


class RuleDecision(enum.StrEnum):
    """What a rule decides: ``deny`` beats ``ask`` beats ``allow``, whatever their order."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Layer(enum.StrEnum):
    """Where a rule comes from, strongest first. A lower layer can add ``deny`` and ``ask``
    but never loosen a higher one: ``deny`` and ``ask`` win whatever the layer."""

    MANAGED = "managed"
    USER = "user"
    PROJECT = "project"
    SESSION = "session"

    @property
    def rank(self) -> int:
        """0 for the strongest layer."""
        return _RANKS[self]


_RANKS = {layer: n for n, layer in enumerate(Layer)}


@attrs.frozen(kw_only=True)
class RuleOrigin:
    """Where a rule was written: its layer, its file (``None`` for rules given in code or by
    a grant), its 1-based index in that file and the rule as written."""

    layer: Layer
    file: str | None = None
    index: int = 1
    text: str = ""

    def describe(self) -> str:
        """``project rule 2 of .broker/rules.toml`` (used in explanations and the log)."""
        where = f" of {self.file}" if self.file else ""
        return f"{self.layer} rule {self.index}{where}"


@attrs.frozen(kw_only=True)
class ArgGlob:
    """A glob on one argument. A path argument (by its name, or :data:`ANY_PATH`) is
    normalised first and matched with path semantics; others with plain glob semantics."""

    key: str
    pattern: str
    is_path: bool = attrs.field(init=False)
    _regex: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        is_path = self.key == ANY_PATH or (self.key != URL_DOMAIN and is_path_key(self.key))
        object.__setattr__(self, "is_path", is_path)
        pattern = self.pattern
        if is_path and (pattern == "~" or pattern.startswith("~/")):
            pattern = normalise_path(pattern) or pattern
        regex = path_glob(pattern) if is_path else name_glob(pattern)
        object.__setattr__(self, "_regex", regex)

    def values(self, arguments: Mapping[str, Any]) -> list[object] | None:
        """The values this glob looks at (a list argument: each item), or None when absent."""
        if self.key == ANY_PATH:
            found = [v for k, v in arguments.items() if is_path_key(k)]
            if not found:
                return None
            value: object = found[0] if len(found) == 1 else found
        elif self.key == URL_DOMAIN:
            url = arguments.get("url")
            if not isinstance(url, str):
                return None
            value = urllib.parse.urlsplit(url).hostname or ""
        elif self.key in arguments:
            value = arguments[self.key]
        else:
            return None
        return list(value) if isinstance(value, list) else [value]

    def matches_value(self, value: object, *, cwd: str | None, lenient: bool) -> bool:
        """Whether *value* matches. *lenient* (deny and ask rules) also matches the value as
        written when it cannot be normalised; an allow rule never does."""
        if not isinstance(value, str):
            return False
        if not self.is_path:
            return self._regex.fullmatch(value) is not None
        candidates = []
        path = normalise_path(value, cwd=cwd)
        if path is not None:
            candidates.append(path)
            if cwd is not None and path.startswith(cwd.rstrip("/") + "/"):
                candidates.append(path[len(cwd.rstrip("/")) + 1 :])  # relative patterns
        elif lenient:
            candidates.append(value)
        return any(self._regex.fullmatch(c) is not None for c in candidates)


@attrs.frozen(kw_only=True)
class Rule:
    """A permission rule (module doc). Build with :meth:`build`."""

    decision: RuleDecision
    tools: tuple[str, ...]
    command: tuple[str, ...] | None = None
    #: With ``command``: the command must be exactly these words (Claude Code's
    #: ``Bash(npm run build)``), not merely begin with them.
    exact: bool = False
    args: tuple[ArgGlob, ...] = ()
    origin: RuleOrigin
    reason: str | None = None
    #: On an ask rule: who alone may answer the questions it sends to people (names,
    #: ``group:NAME``, ``uid:NAME``); empty: anyone who answers.
    approvers: tuple[str, ...] = ()
    #: On an ask rule with approvers: how many different approvers must allow its questions
    #: (one reject rejects at once); 1: the first answer decides.
    quorum: int = 1
    _tool_regexes: tuple[re.Pattern[str], ...] = attrs.field(eq=False, repr=False)

    @classmethod
    def build(
        cls,
        *,
        decision: RuleDecision,
        tools: Iterable[str],
        origin: RuleOrigin,
        command: tuple[str, ...] | None = None,
        exact: bool = False,
        args: Mapping[str, str] | None = None,
        reason: str | None = None,
        approvers: tuple[str, ...] = (),
        quorum: int = 1,
    ) -> Rule:
        """Compile the globs; :class:`~._glob.GlobError` names a bad one."""
        names = tuple(tools)
        return cls(
            decision=decision,
            tools=names,
            command=command,
            exact=exact,
            args=tuple(ArgGlob(key=k, pattern=v) for k, v in (args or {}).items()),
            origin=origin,
            reason=reason,
            approvers=approvers,
            quorum=quorum,
            tool_regexes=tuple(name_glob(t) for t in names),
        )

    def covers_tool(self, names: tuple[str, ...]) -> bool:
        """Whether a tool known by *names* (its aliases) is one of this rule's tools."""
        return any(r.fullmatch(n) is not None for r in self._tool_regexes for n in names)

    def matches_args(self, arguments: Mapping[str, Any] | None, *, cwd: str | None) -> bool:
        """Whether every argument glob matches. An allow rule needs every value of each
        argument to match; a deny or ask rule any value."""
        if not self.args:
            return True
        if arguments is None:
            return False
        lenient = self.decision is not RuleDecision.ALLOW
        for glob in self.args:
            values = glob.values(arguments)
            if not values:
                return False
            hits = (glob.matches_value(v, cwd=cwd, lenient=lenient) for v in values)
            if not (any(hits) if lenient else all(hits)):
                return False
        return True

    def matches_words(self, words: tuple[str, ...]) -> bool:
        """Whether a simple command's *words* are covered by this rule's ``command``. A deny
        or ask rule also covers the program named by a path (``/bin/rm`` for ``rm``)."""
        prefix = self.command
        if prefix is None:
            return True
        n = len(prefix)
        if self._words_match(words, prefix, n):
            return True
        if self.decision is RuleDecision.ALLOW or not words or "/" not in words[0]:
            return False
        program = words[0].rsplit("/", 1)[1]
        return self._words_match((program, *words[1:]), prefix, n)

    def _words_match(self, words: tuple[str, ...], prefix: tuple[str, ...], n: int) -> bool:
        if self.exact:
            return words == prefix
        return words[:n] == prefix
