"""Argument types that refuse bad numbers with a message naming the rule (argparse adds the
option's name): ``broker chaos --seeds 0`` is a usage error, not a silent no-op."""

from __future__ import annotations

import argparse
import math

__all__ = ["fraction", "integer", "positive_integer", "positive_seconds"]


def integer(text: str) -> int:
    """Any whole number (a seed)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_integer(text: str) -> int:
    """A whole number of at least 1 (a count)."""
    value = integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (a deadline)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite number of seconds above 0, got {text!r}"
        )
    return value


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """A duration above 0: seconds (``90``), or with a unit (``90s``, ``30m``, ``2h``, ``1d``)."""
    unit = _UNITS.get(text[-1:].lower()) if text else None
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 30m, 2h or 1d, got {text!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a duration above 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A probability: a number from 0 to 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text!r}")
    return value
