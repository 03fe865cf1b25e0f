"""The context ledger: what an agent's model has been given in its runtime context.

Before each model step the agent loop computes the runtime-context entries that apply now
(``approval:policy``, ``approval:delegation``, ``sandbox:mode``) and offers each to the ledger;
the ledger answers with the text only when it differs from what that key last gave, so the
model sees an entry on its first step and after each change, never twice in a row. One ledger
per agent (``Agent.context``); the agent loop is its only writer in a composed agent, and
:meth:`Broker.approval_context_update` / :meth:`Broker.delegation_context_update` offer to it.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["APPROVAL_DELEGATION", "APPROVAL_POLICY", "ContextLedger"]

#: The runtime-context key of the effective approval policy's text.
APPROVAL_POLICY: Final = "approval:policy"
#: The runtime-context key of a ``pin-never`` child's delegation statement.
APPROVAL_DELEGATION: Final = "approval:delegation"


@attrs.define(eq=False)
class ContextLedger:
    """Per key, the runtime-context text the model was last given."""

    _given: dict[str, str] = attrs.field(factory=dict, init=False)

    def offer(self, key: str, text: str) -> str | None:
        """*text* if the model has not been given it for *key* yet (it is now), else None."""
        if self._given.get(key) == text:
            return None
        self._given[key] = text
        return text
