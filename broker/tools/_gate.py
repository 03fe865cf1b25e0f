"""Pre-execute gate decisions (contract §8.1): allow, deny with a reason, or ask (maybe why)."""

from __future__ import annotations

import attrs

__all__ = ["Allow", "Ask", "Deny", "GateDecision"]


@attrs.frozen(kw_only=True)
class Allow:
    """Let the call proceed (the waterfall's default)."""


@attrs.frozen(kw_only=True)
class Deny:
    """Refuse the call; the model sees ``Error: <reason>``."""

    reason: str


@attrs.frozen(kw_only=True)
class Ask:
    """Resolve the call through the approval seam before dispatch; ``reason`` is logged."""

    reason: str | None = None


GateDecision = Allow | Deny | Ask
