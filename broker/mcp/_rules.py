"""The rules file of ``broker mcp-gate``: tool-name patterns that pass or are refused unasked.

Synopsis::

    # gate.toml
    allow = ["read_*", "list_files"]     # run without asking
    deny = ["delete_*"]                  # refused without asking

    rules = GateRules.load("gate.toml")
    rules.decide("read_file")            # Outcome.ALLOWED_ONCE
    rules.decide("write_file")           # None: the next answerer is asked

Patterns are shell globs matched case-sensitively against the whole MCP tool name
(:func:`fnmatch.fnmatchcase`). ``deny`` wins over ``allow``; a name no pattern matches is not
decided here: nothing passes by default.
"""

from __future__ import annotations

import fnmatch
import pathlib
import tomllib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import trio

from .._decision import Answer
from .._vocabulary import Outcome

if TYPE_CHECKING:
    from .._answerers import AnswerNext
    from .._request import ApprovalRequest

__all__ = ["GateRules", "RulesError"]

_KEYS = ("allow", "deny")


class RulesError(ValueError):
    """A rules file that cannot be used; the message names the file, the key and the fix."""


def _patterns(where: str, data: dict[str, object], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise RulesError(
            f"rules file {where}: {key} must be a list of non-empty tool-name patterns, "
            f'got {value!r}: write {key} = ["read_*"]'
        )
    return tuple(value)


@attrs.frozen(kw_only=True)
class GateRules:
    """Tool-name patterns decided without asking (module doc); ``source`` names them in
    ``answeredBy``."""

    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    source: str = "rules"

    @classmethod
    def load(cls, path: str | pathlib.Path) -> GateRules:
        """Read a TOML rules file; :class:`RulesError` names what is wrong with it."""
        where = str(path)
        try:
            data = tomllib.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise RulesError(
                f"rules file {where}: cannot read it ({exc.strerror}): check the --rules path"
            ) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise RulesError(f"rules file {where}: not TOML ({exc}): fix the file") from None
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise RulesError(
                f"rules file {where}: unknown key {unknown[0]!r}: only allow and deny are read"
            )
        return cls(
            allow=_patterns(where, data, "allow"),
            deny=_patterns(where, data, "deny"),
            source=f"rules file {pathlib.Path(path).name}",
        )

    def decide(self, tool_name: str) -> Outcome | None:
        """``rejected`` when a deny pattern matches, ``allowed-once`` when an allow pattern
        does, else ``None`` (ask the next answerer)."""
        if any(fnmatch.fnmatchcase(tool_name, p) for p in self.deny):
            return Outcome.REJECTED
        if any(fnmatch.fnmatchcase(tool_name, p) for p in self.allow):
            return Outcome.ALLOWED_ONCE
        return None

    async def __call__(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome | Answer:
        """The answerer: decides by :meth:`decide`, or delegates. Cancellation: only while
        delegating."""
        outcome = self.decide(req.tool_name)
        if outcome is None:
            return await next_()
        await trio.lowlevel.checkpoint()
        return Answer(outcome=outcome, by=self.source)
