"""The design pages match the code: their module tables, the contract's exact texts, and no
path that leads outside the repository.

**Module tables.** A module table is a Markdown table whose header row is
``| module | concept |``: in ``design/architecture.md`` the one in its section ``## Modules``
(names relative to ``broker/``), in ``design/store.md`` its one such table (names relative to
``broker/store/``; a name starting with ``broker/`` is relative to the repository). Only the
first column counts, and in it every backquoted name: ``_vocabulary.py`` names a module,
``rules/`` a folder and every module under it; several names may share a cell
(``_events.py``, ``_codec.py``). Any other backquoted word in the first column is an error,
so a typo cannot pass as prose.

A *module* is a ``.py`` file of ``broker/`` (``__pycache__`` aside); an ``__init__.py`` counts
only for a package with no other module (``scenarios/``).
"""

from __future__ import annotations

import enum
import json
import pathlib
import re

import pytest

from broker import _texts
from broker._vocabulary import POLICY_ERROR, Delegation, Outcome, Policy, Source
from broker.acp._answerer import ALLOW_ONCE, REJECT_ONCE
from broker.acp._wire import to_wire
from broker.hooks._bridge import DEFAULT_DENY_REASON
from broker.tools import ESCALATION_HINT, SandboxMode, denial_marker
from broker.tools import _texts as tool_texts

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "broker"
DESIGN = ROOT / "design"
ARCHITECTURE = DESIGN / "architecture.md"
STORE = DESIGN / "store.md"
CONTRACT = DESIGN / "contract.md"

_NAME = re.compile(r"`([^`]+)`")


# -- module tables --------------------------------------------------------------------------


def modules(under: pathlib.Path = PACKAGE) -> set[str]:
    """Every module of *under* as a path relative to the repository (module doc)."""
    found: set[str] = set()
    for path in sorted(under.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        if path.name == "__init__.py" and any(
            p.name != "__init__.py" for p in path.parent.glob("*.py")
        ):
            continue
        found.add(path.relative_to(ROOT).as_posix())
    return found


def section(text: str, heading: str) -> str:
    """The body of the ``## `` section *heading* (up to the next ``## `` heading)."""
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next(
        (i for i in range(start, len(lines)) if lines[i].startswith("## ")),
        len(lines),
    )
    return "\n".join(lines[start:end])


def first_cells(text: str) -> list[str]:
    """The first cells of the rows of every ``| module | concept |`` table in *text*."""
    cells: list[str] = []
    in_table = False
    for line in text.splitlines():
        if not line.startswith("|"):
            in_table = False
            continue
        first = line.strip("|").split("|")[0].strip()
        if first == "module":
            in_table = True
        elif in_table and not set(first) <= set("-: "):
            cells.append(first)
    return cells


def table_names(page: pathlib.Path) -> list[str]:
    """The names of *page*'s module table, as paths relative to the repository (a folder
    keeps its trailing ``/``)."""
    text = page.read_text(encoding="utf-8")
    if page == ARCHITECTURE:
        cells, base = first_cells(section(text, "## Modules")), "broker/"
    else:
        cells, base = first_cells(text), "broker/store/"
    assert cells, f"{page.name}: no | module | concept | table found"
    names: list[str] = []
    for cell in cells:
        found = _NAME.findall(cell)
        assert found, f"{page.name}: the row {cell!r} names no module or folder"
        for name in found:
            assert name.endswith((".py", "/")), (
                f"{page.name}: {name!r} in the first column is neither a module (.py) "
                "nor a folder (/)"
            )
            names.append(name if name.startswith("broker/") else base + name)
    return names


def covered(names: list[str], module: str) -> bool:
    return any(module == n or (n.endswith("/") and module.startswith(n)) for n in names)


def uncovered(names: list[str], wanted: set[str]) -> list[str]:
    return sorted(m for m in wanted if not covered(names, m))


def missing(names: list[str]) -> list[str]:
    """Names that do not exist: a module that is not a file, a folder with no module."""
    gone = []
    for name in names:
        path = ROOT / name
        if name.endswith("/"):
            if not path.is_dir() or not any(path.rglob("*.py")):
                gone.append(name)
        elif not path.is_file():
            gone.append(name)
    return gone


def test_every_module_of_the_package_is_in_a_module_table() -> None:
    names = table_names(ARCHITECTURE) + table_names(STORE)
    assert uncovered(names, modules()) == []


@pytest.mark.parametrize("page", [ARCHITECTURE, STORE], ids=lambda p: p.name)
def test_every_name_in_a_module_table_exists(page: pathlib.Path) -> None:
    assert missing(table_names(page)) == []


def test_the_store_page_lists_each_store_module() -> None:
    """``store/`` in the architecture's table points to store.md, whose table is the store's
    own list: it names every module of ``broker/store/``, without the architecture's help."""
    assert uncovered(table_names(STORE), modules(PACKAGE / "store")) == []


def test_the_table_check_fails_for_a_module_no_table_names() -> None:
    """The checks can fail: a module nobody named, a name that does not exist."""
    names = table_names(ARCHITECTURE)
    assert uncovered([n for n in names if n != "broker/_vocabulary.py"], modules()) == [
        "broker/_vocabulary.py"
    ]
    assert missing([*names, "broker/_no_such_module.py", "broker/no_such_folder/"]) == [
        "broker/_no_such_module.py",
        "broker/no_such_folder/",
    ]
    assert first_cells("| module | concept |\n|---|---|\n| `a.py`, `b/` | x |\n\n| c | d |") == [
        "`a.py`, `b/`"
    ]


# -- no path outside the repository ---------------------------------------------------------

OUTSIDE = ("../shared", "/work/shared", "approval-seam.md", "../seeds")


def checked_files() -> list[pathlib.Path]:
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md"]
    for folder in (PACKAGE, DESIGN):
        files += [
            p for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts
        ]
    return files


def test_no_file_names_a_path_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {marker}"
        for path in checked_files()
        for marker in OUTSIDE
        if marker.encode() in path.read_bytes()
    ]
    assert found == []


# -- the contract page ----------------------------------------------------------------------

SECTIONS = [
    "## 1. Vocabulary",
    "## 2. Session log events (durable, log-only, never shown to the model)",
    "## 3. `request(req) -> Outcome` — the algorithm, in this order",
    "## 4. Answerers: the waterfall",
    "## 5. Policy tier",
    "## 6. Remembered grants",
    "## 7. Durability, projection, recovery",
    "## 8. Consumers",
    "### 8.1 Tool runtime ask routing (`tools/pre-execute`)",
    "### 8.2 Sandboxed bash and the escalation gate",
    "### 8.3 Claude-Code hook bridge",
    "### 8.4 ACP answerer (Agent Client Protocol v1, agent side)",
    "### 8.5 Subagents (delegation)",
    "## 9. Recorded scenarios (snapshot tests)",
]


def test_the_contract_keeps_the_section_numbers_the_docstrings_cite() -> None:
    headings = [
        line
        for line in CONTRACT.read_text(encoding="utf-8").splitlines()
        if re.match(r"#{2,3} \d", line)
    ]
    assert [h for h in headings if h in SECTIONS] == SECTIONS
    numbers = [h.split()[1].rstrip(".") for h in headings]
    assert numbers == sorted(numbers, key=lambda n: [int(p) for p in n.split(".")])


class _Error(Exception):
    pass


_Error.__name__ = "<Error>"


def exact_texts() -> list[str]:
    """Every exact text of the contract, from the code, with the page's placeholders."""
    name, mode, current = "<name>", "<mode>", "<current>"
    ask, never = Policy.ASK, Policy.NEVER
    marker = denial_marker(SandboxMode.READ_ONLY).replace(SandboxMode.READ_ONLY, mode)
    return [
        _texts.OUTSIDE_TURN,
        POLICY_ERROR,
        _texts.policy_switch_notice(ask, never),
        _texts.policy_switch_notice(never, ask),
        _texts.policy_phrase(ask),
        _texts.policy_phrase(never),
        _texts.policy_context(ask),
        _texts.policy_context(never),
        _texts.DELEGATION_STATEMENT,
        tool_texts.ask_no_service(name),
        tool_texts.ask_no_agent(name),
        tool_texts.ask_rejected(name),
        tool_texts.ask_rejected_by_policy(name),
        tool_texts.ask_rejected_by_rule(name, "<rule>", "<reason>"),
        tool_texts.ask_rejected_by_rule(name, "<rule>", None),
        tool_texts.ask_cancelled(name),
        tool_texts.ask_unavailable(name),
        tool_texts.ABORTED_BEFORE_DISPATCH,
        tool_texts.ask_failed(name, _Error("<message>")),
        tool_texts.arguments_changed(name),
        marker,
        ESCALATION_HINT,
        tool_texts.ESCALATION_NEEDS_JUSTIFICATION,
        tool_texts.ESCALATION_JUSTIFICATION_ALONE,
        tool_texts.ESCALATION_JUSTIFICATION_EMPTY,
        tool_texts.ESCALATION_NO_SANDBOX,
        tool_texts.escalation_not_wider(mode, current),
        tool_texts.escalation_no_service(mode),
        tool_texts.escalation_no_agent(mode),
        tool_texts.escalation_reason(mode, "<justification>"),
        tool_texts.escalation_rejected(mode),
        tool_texts.escalation_rejected_by_policy(mode),
        tool_texts.escalation_rejected_by_rule(mode, "<rule>", "<reason>"),
        tool_texts.escalation_cancelled(mode),
        tool_texts.escalation_unavailable(mode),
        DEFAULT_DENY_REASON,
        *(json.dumps(to_wire(o), separators=(",", ":")) for o in (ALLOW_ONCE, REJECT_ONCE)),
    ]


@pytest.mark.parametrize("text", exact_texts())
def test_the_contract_states_each_exact_text_as_the_code_has_it(text: str) -> None:
    """Byte for byte: in a code span, or as a line of its own (a fenced block)."""
    page = CONTRACT.read_text(encoding="utf-8")
    assert f"`{text}`" in page or text in (line.strip() for line in page.splitlines())


@pytest.mark.parametrize("vocabulary", [Outcome, Policy, Delegation, Source])
def test_the_contract_names_every_value_of_a_closed_vocabulary(
    vocabulary: type[enum.StrEnum],
) -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    assert [v.value for v in vocabulary if f"`{v.value}`" not in text] == []
