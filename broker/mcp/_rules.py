"""The rules file of ``broker mcp-gate``: the broker's rules (:mod:`broker.rules`) for one
gated connection.

Synopsis::

    # gate.toml: the broker's rules format ...
    [[rules]]
    decision = "deny"
    tool = "write_*"
    [rules.args]
    path = "/etc/**"

    # ... or the gate's older lists of tool-name globs (both may be in one file)
    allow = ["read_*", "list_files"]     # run without asking
    deny = ["delete_*"]                  # refused without asking

    rules = GateRules.load("gate.toml")
    rules.decide("read_file")            # Outcome.ALLOWED_ONCE
    rules.decide("write_file", {"path": "/etc/passwd"})   # Outcome.REJECTED
    rules.decide("write_file")           # None: the next answerer is asked

The gate gives them to its connection's session (:meth:`Session.set_session_rules`), so they
decide in the request algorithm itself, like any other rule: ``deny`` beats ``ask`` beats
``allow``, a call no rule covers is asked, and the log names the rule that decided.
"""

from __future__ import annotations

import functools
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._vocabulary import Outcome
from ..rules import Layer, Rule, RuleDecision, RuleOrigin, RuleSet, RulesFileError, load_rules

__all__ = ["GateRules", "RulesError"]

#: A rules file that cannot be used; the message names the file, the rule and the fix.
RulesError = RulesFileError


@attrs.frozen(kw_only=True)
class GateRules:
    """The gate's rules: ``allow``/``deny`` tool-name globs given in code, and ``rules`` loaded
    from a file (module doc). ``source`` names where they come from."""

    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    rules: tuple[Rule, ...] = ()
    source: str = "rules"

    @classmethod
    def load(cls, path: str | Any) -> GateRules:
        """Read a rules file (:func:`broker.rules.load_rules`); :class:`RulesError` lists
        what is wrong with it."""
        name = pathlib.Path(path).name
        return cls(rules=load_rules(path, Layer.PROJECT), source=f"rules file {name}")

    @functools.cached_property
    def rule_set(self) -> RuleSet:
        """All of them as one :class:`~broker.rules.RuleSet`."""
        made: list[Rule] = list(self.rules)
        listed = [(RuleDecision.DENY, p) for p in self.deny]
        listed += [(RuleDecision.ALLOW, p) for p in self.allow]
        for n, (decision, pattern) in enumerate(listed, start=1):
            text = f"{decision.value} = [{pattern!r}]"
            origin = RuleOrigin(layer=Layer.SESSION, index=n, text=text)
            made.append(Rule.build(decision=decision, tools=(pattern,), origin=origin))
        return RuleSet(made)

    def decide(self, tool_name: str, arguments: Mapping[str, Any] | None = None) -> Outcome | None:
        """``rejected`` when a deny rule covers the call, ``allowed-once`` when an allow rule
        does (and no ask rule), else ``None`` (ask the next answerer)."""
        return self.rule_set.decide(tool_name, arguments).outcome
