"""The changelog and the benchmarks' README: their links hold, and ``python -m bench`` can
rewrite the figures between bench/README.md's markers without touching anything else."""

from __future__ import annotations

import pathlib

import pytest

from bench.__main__ import END, START, figures_block, write_figures
from bench._suite import Figure, Result
from tests.test_readme import ROOT, broken_links, history_in, outside_paths

CHANGELOG = ROOT / "CHANGELOG.md"
BENCH_README = ROOT / "bench" / "README.md"


@pytest.mark.parametrize("doc", [CHANGELOG, BENCH_README], ids=lambda doc: doc.name)
def test_every_relative_link_names_a_file_of_the_repository(doc: pathlib.Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert broken_links(doc) == []
    assert [path for path in outside_paths(text) if not path.startswith("../design/")] == []


def test_the_changelog_tells_changes_not_history() -> None:
    text = CHANGELOG.read_text(encoding="utf-8")
    assert history_in(text) == []
    assert text.splitlines()[0] == "# Changelog"
    assert "## Unreleased" in text


def between(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0]


def test_the_committed_figures_are_in_the_format_a_run_writes() -> None:
    """A run that measured nothing writes the committed block back unchanged."""
    old = between(BENCH_README.read_text(encoding="utf-8"))
    assert figures_block(old, [], "nowhere") == old.strip("\n")


def test_a_run_replaces_its_rows_and_keeps_the_rest(tmp_path: pathlib.Path) -> None:
    readme = tmp_path / "README.md"
    committed = BENCH_README.read_text(encoding="utf-8")
    readme.write_text(committed, encoding="utf-8")
    result = Result(
        name="rules",
        figures=(
            Figure(
                label="RuleSet.decide p50",
                value=12.5,
                unit="µs",
                baseline=10.0,
                baseline_label="parse p50",
                target="<= 20 µs",
                met=True,
            ),
        ),
    )
    write_figures(readme, [("rules", result)], "a test machine, 2099-01-01, full run")
    text = readme.read_text(encoding="utf-8")
    head, tail = committed.split(START)[0], committed.split(END)[1]
    assert text.startswith(head)
    assert text.endswith(tail)
    block = between(text)
    rules_rows = [row for row in block.splitlines() if "`python -m bench --only rules`" in row]
    assert rules_rows == [
        "| rules: RuleSet.decide p50 | 12.50 µs | parse p50: 10.00 µs | 1.25× | <= 20 µs: met "
        "| `python -m bench --only rules` |"
    ]
    old_rows = [row for row in between(committed).splitlines() if row.startswith("| ")]
    kept = [row for row in old_rows if "--only rules" not in row]
    assert [row for row in block.splitlines() if row in kept] == kept
    assert "- rules: a test machine, 2099-01-01, full run" in block.splitlines()
    assert not any(line.startswith("- ") and "rules," in line for line in block.splitlines())


def test_a_file_without_markers_gets_them_at_its_end(tmp_path: pathlib.Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# Mine\n\nkept as written\n", encoding="utf-8")
    write_figures(readme, [], "nowhere")
    text = readme.read_text(encoding="utf-8")
    assert text.startswith("# Mine\n\nkept as written\n\n" + START)
    assert text.rstrip("\n").endswith(END)
