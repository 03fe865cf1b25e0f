"""Packages import each other through their front doors: a private module (``_name.py``) is
private to its package. A module may import a sibling package only through that package's
``__init__`` (which re-exports what its siblings need), never ``from ..store._board import …``.

Every ``from`` import counts, those under ``if TYPE_CHECKING:`` too. A package's own modules,
and its subpackages' parents, are inside: ``broker/store/_boards.py`` may import
``broker/store/_board.py``; ``broker/store/sqlite/_board.py`` may import
``broker/store/_board.py`` (its parent package); ``broker/store/_boards.py`` may not import
``broker/store/sqlite/_board.py`` (a subpackage's private module).
"""

from __future__ import annotations

import ast
import pathlib

import broker

ROOT = pathlib.Path(broker.__file__).parent
PACKAGES = {init.parent for init in ROOT.rglob("__init__.py")}


def _reaches_in(file: pathlib.Path, node: ast.ImportFrom) -> pathlib.Path | None:
    """The private module of another package that *node* imports from, if any."""
    if not node.level or not node.module:
        return None
    base = file.parent
    for _ in range(node.level - 1):
        base = base.parent
    parts = node.module.split(".")
    if not parts[-1].startswith("_"):
        return None
    owner = base.joinpath(*parts[:-1])
    if owner not in PACKAGES or owner == ROOT:
        return None  # the core's modules are one package's own
    here = file.parent
    if here == owner or owner in here.parents:
        return None  # inside the package (or one of its subpackages)
    return owner / f"{parts[-1]}.py"


def violations() -> list[str]:
    found = []
    for file in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                private = _reaches_in(file, node)
                if private is not None:
                    found.append(
                        f"{file.relative_to(ROOT.parent)}:{node.lineno} imports "
                        f"{private.relative_to(ROOT.parent)}: import it from its package"
                    )
    return found


def test_packages_are_entered_through_their_front_doors() -> None:
    assert violations() == []


def _import(text: str) -> ast.ImportFrom:
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.ImportFrom)
    return node


def test_the_check_sees_a_reach_past_the_door() -> None:
    calls = ROOT / "mcp" / "_calls.py"
    boards = ROOT / "store" / "_boards.py"
    sqlite_board = ROOT / "store" / "sqlite" / "_board.py"
    reach = _import("from ..store._board import AnswerBoard")
    assert _reaches_in(calls, reach) == ROOT / "store" / "_board.py"
    assert _reaches_in(calls, _import("from ..store import AnswerBoard")) is None
    assert _reaches_in(calls, _import("from ._frames import id_key")) is None
    child = _import("from .sqlite._board import SqliteBoard")
    assert _reaches_in(boards, child) == ROOT / "store" / "sqlite" / "_board.py"
    assert _reaches_in(sqlite_board, _import("from .._board import PendingQuestion")) is None
