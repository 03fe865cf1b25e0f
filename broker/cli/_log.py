"""Placeholder replaced by the ``broker log`` sub-command of the durable store."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]


def register(sub: _Sub) -> None:
    """Nothing yet."""
