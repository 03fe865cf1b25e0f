"""Built-in scenarios for the scripted model (package data)."""

from __future__ import annotations

import pathlib

__all__ = ["scenario_path"]


def scenario_path(name: str) -> pathlib.Path:
    """The path of the built-in scenario *name* (e.g. ``"escalation"``)."""
    path = pathlib.Path(__file__).with_name(f"{name}.json")
    if not path.is_file():
        known = sorted(p.stem for p in pathlib.Path(__file__).parent.glob("*.json"))
        raise ValueError(f"name must be a built-in scenario, got {name!r}: one of {known}")
    return path
