"""One page maps the exception tree (``broker/_errors.py``'s docstring, as httpx's
``_exceptions.py`` does): every exception class the package defines is on it, every name on it
exists, and the drawn parentage is the real one."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re

import broker
from broker import _errors

ROOT = pathlib.Path(broker.__file__).parent


def defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for file in sorted(ROOT.rglob("*.py")):
        parts = file.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and issubclass(cls, BaseException)
                and cls.__module__.split(".")[0] == "broker"
                and not cls.__name__.startswith("_")
            ):
                # Any class of the package's (a public class reports its public module, see
                # broker._module_metadata); two of one name are one entry on the map.
                found[cls.__name__] = cls  # its own name, not an alias it is imported as

    return found


def mapped_names() -> set[str]:
    doc = _errors.__doc__ or ""
    return set(re.findall(r"\b([A-Z][A-Za-z]+(?:Error|Closed|Lost|Problem|Skipped|Long))\b", doc))


def test_every_exception_is_on_the_map_and_every_name_exists() -> None:
    defined = defined_exceptions()
    builtin = {"ValueError", "TypeError", "RuntimeError", "OSError", "AssertionError"}
    assert set(defined) - mapped_names() == set()
    assert mapped_names() - set(defined) - builtin == set()


def test_the_drawn_tree_is_the_real_one() -> None:
    defined = defined_exceptions()
    doc = (_errors.__doc__ or "").split("Not BrokerError")[0]
    stack: list[tuple[int, str]] = []
    checked = 0
    for line in doc.splitlines():
        match = re.match(r"^\s*((?:[│ ]   )*)(?:[├└]── )?([A-Z][A-Za-z]+)\b", line)
        if match is None or match.group(2) not in defined:
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        name = match.group(2)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            parent = defined[stack[-1][1]]
            assert issubclass(defined[name], parent), f"{name} is drawn under {parent.__name__}"
            checked += 1
        stack.append((depth, name))
    assert checked >= 30
