"""The MCP gate's rules file (``broker/mcp/_rules.py``): globs over whole tool names, deny
wins, nothing passes by default, and a file that cannot be used is named with the fix."""

from __future__ import annotations

import pathlib

import pytest

from broker import Outcome
from broker.mcp import GateRules, RulesError


@pytest.mark.parametrize(
    ("tool", "outcome"),
    [
        ("read_file", Outcome.ALLOWED_ONCE),
        ("list_dir", Outcome.ALLOWED_ONCE),
        ("read_secret", Outcome.REJECTED),  # deny wins over allow
        ("Read_file", None),  # case-sensitive
        ("xread_file", None),  # the whole name
        ("write_file", None),  # nothing passes by default
    ],
)
def test_deny_wins_and_nothing_passes_by_default(tool: str, outcome: Outcome | None) -> None:
    rules = GateRules(allow=["read_*", "list_?ir"], deny=["*_secret"])
    assert rules.decide(tool) is outcome


def test_an_empty_rules_file_decides_nothing(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "gate.toml"
    path.write_text("")
    rules = GateRules.load(path)
    assert rules.decide("anything") is None
    assert rules.source == "rules file gate.toml"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("deny = [1]\n", r"deny must be a list of non-empty tool-name patterns, got \[1\]"),
        ('allow = [""]\n', r"allow must be a list of non-empty tool-name patterns"),
        ("[allow]\n", r"allow must be a list"),
        ("allow = [\n", r"not TOML \("),
        ('ask = "x"\n', r"ask must be a list of non-empty tool-name patterns"),
        (
            'asks = ["x"]\n',
            r"unknown key 'asks': write \[\[rules\]\] tables \(or allow/deny lists of tool names\)",
        ),
    ],
)
def test_a_file_that_cannot_be_used_is_named(
    tmp_path: pathlib.Path, text: str, message: str
) -> None:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    with pytest.raises(RulesError, match=rf"^rules file {path}: {message}"):
        GateRules.load(path)


def test_a_missing_file_says_to_check_the_path(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "missing.toml"
    with pytest.raises(
        RulesError,
        match=rf"^rules file {path}: cannot read it \(No such file or directory\): "
        r"check the path$",
    ):
        GateRules.load(path)
