"""Composition settings (``broker acp --config``): structured by cattrs, every bad value named.

Each bad input below is refused with the file, the key and what is expected; each test also
shows the good neighbour of its bad value loads, so the assertion can fail.
"""

from __future__ import annotations

import math
import pathlib

import pytest

from broker._composition import DEFAULT_PERMISSION_DEADLINE, Composition, CompositionError
from broker._vocabulary import Delegation, Policy
from broker.scenarios import scenario_path
from broker.tools import SandboxMode


def write(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "broker.toml"
    path.write_text(text, encoding="utf-8")
    return path


def refused(tmp_path: pathlib.Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(CompositionError) as info:
        Composition.load(path)
    prefix = f"config {str(path)!r}: "
    message = str(info.value)
    assert message.startswith(prefix)
    return message.removeprefix(prefix)


def test_defaults_without_a_file() -> None:
    composition = Composition.load()
    assert composition.policy is Policy.ASK
    assert composition.delegation is Delegation.PIN_NEVER
    assert composition.sandbox is SandboxMode.READ_ONLY
    assert composition.store is None
    assert composition.hooks is None
    assert composition.permission_deadline == DEFAULT_PERMISSION_DEADLINE
    assert composition.allow_always is False
    assert composition.max_steps == 32
    assert composition.command_time_limit == 30.0


def test_every_key_loads_and_relative_paths_follow_the_file(tmp_path: pathlib.Path) -> None:
    (tmp_path / "s.json").write_text(scenario_path("escalation").read_text())
    path = write(
        tmp_path,
        'policy = "never"\ndelegation = "inherit"\nsandbox = "none"\nscenario = "s.json"\n'
        'store = "logs/a.sqlite"\npermission_deadline = 2\nallow_always = true\n'
        "max_steps = 3\ncommand_time_limit = 0.5\n",
    )
    composition = Composition.load(path)
    assert composition.policy is Policy.NEVER
    assert composition.delegation is Delegation.INHERIT
    assert composition.sandbox is None
    assert composition.store == tmp_path / "logs/a.sqlite"
    assert composition.permission_deadline == 2.0
    assert isinstance(composition.permission_deadline, float)
    assert composition.allow_always is True
    assert composition.max_steps == 3
    assert composition.command_time_limit == 0.5


def test_overrides_win_and_default_store_applies_only_when_unnamed(
    tmp_path: pathlib.Path,
) -> None:
    path = write(tmp_path, 'policy = "never"\nstore = ":memory:"\n')
    composition = Composition.load(path, default_store=tmp_path / "d.sqlite", policy="ask")
    assert composition.policy is Policy.ASK
    assert composition.store is None
    assert Composition.load(default_store=tmp_path / "d.sqlite").store == tmp_path / "d.sqlite"
    assert Composition.load(store=tmp_path / "o.sqlite").store == tmp_path / "o.sqlite"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('policy = "maybe"', 'policy: expected one of "ask", "never", got "maybe"'),
        ("policy = 1", 'policy: expected one of "ask", "never", got 1'),
        (
            'delegation = "sometimes"',
            'delegation: expected one of "pin-never", "inherit", got "sometimes"',
        ),
        (
            'sandbox = "open"',
            'sandbox: expected one of "read-only", "workspace-write", "danger-full-access", '
            '"none", got "open"',
        ),
        ("scenario = 3", "scenario: expected a path (a string), got 3"),
        ("store = true", "store: expected a path (a string), got true"),
        ("hooks = [1]", "hooks: expected a path (a string), got [1]"),
        (
            'permission_deadline = "x"',
            'permission_deadline: expected a finite number of seconds above 0, got "x"',
        ),
        (
            "permission_deadline = 0",
            "permission_deadline: expected a finite number of seconds above 0, got 0",
        ),
        (
            "permission_deadline = inf",
            "permission_deadline: expected a finite number of seconds above 0, got inf",
        ),
        (
            "command_time_limit = nan",
            "command_time_limit: expected a finite number of seconds above 0, got nan",
        ),
        (
            "command_time_limit = -1.5",
            "command_time_limit: expected a finite number of seconds above 0, got -1.5",
        ),
        (
            "command_time_limit = true",
            "command_time_limit: expected a finite number of seconds above 0, got true",
        ),
        ("max_steps = 0", "max_steps: expected a whole number of at least 1, got 0"),
        ("max_steps = 2.5", "max_steps: expected a whole number of at least 1, got 2.5"),
        ("max_steps = true", "max_steps: expected a whole number of at least 1, got true"),
        ('allow_always = "yes"', 'allow_always: expected true or false, got "yes"'),
        ("allow_always = 1", "allow_always: expected true or false, got 1"),
        (
            "polcy = 1",
            "unexpected keys (polcy): expected only policy, delegation, sandbox, scenario, "
            "store, hooks, rules, permission_deadline, allow_always, always_for, project_rules, "
            "remote_answers, "
            "max_steps, command_time_limit",
        ),
    ],
)
def test_a_bad_value_names_its_key_and_what_is_expected(
    tmp_path: pathlib.Path, text: str, message: str
) -> None:
    assert refused(tmp_path, text) == message


def test_every_bad_value_is_named_at_once(tmp_path: pathlib.Path) -> None:
    assert refused(tmp_path, "max_steps = 0\nallow_always = 1\n") == (
        "allow_always: expected true or false, got 1; "
        "max_steps: expected a whole number of at least 1, got 0"
    )


def test_an_unknown_built_in_scenario_lists_the_known_ones(tmp_path: pathlib.Path) -> None:
    assert refused(tmp_path, 'scenario = "nope"').startswith(
        "scenario: name must be a built-in scenario, got 'nope': one of ["
    )


def test_an_unreadable_or_invalid_file_says_so(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(CompositionError, match=r"cannot be read: No such file or directory; pass"):
        Composition.load(missing)
    path = write(tmp_path, "policy = ")
    with pytest.raises(CompositionError, match=r"^config '.*broker\.toml' is not valid TOML: "):
        Composition.load(path)


def test_overrides_are_checked_like_the_file() -> None:
    with pytest.raises(CompositionError) as info:
        Composition.load(permission_deadline=math.inf)
    assert str(info.value) == (
        "settings: permission_deadline: expected a finite number of seconds above 0, got inf"
    )


def test_remote_answers_is_a_setting(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("remote_answers = true\n")
    assert Composition.load(config).remote_answers is True
    assert Composition.load(config, remote_answers=False).remote_answers is False
    config.write_text('remote_answers = "yes"\n')
    with pytest.raises(CompositionError, match=r"remote_answers: expected true or false"):
        Composition.load(config)


def test_rules_files_and_the_hooks_permissions_are_the_compositions_rules(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "rules.toml").write_text(
        '[[rules]]\ndecision = "deny"\ntool = "bash"\ncommand = "rm"\n'
    )
    (tmp_path / "settings.json").write_text(
        '{"permissions": {"allow": ["Bash(git status:*)"]}, "hooks": {}}'
    )
    config = tmp_path / "broker.toml"
    config.write_text('rules = ["rules.toml"]\nhooks = "settings.json"\n')
    rules = Composition.load(config).rules
    assert rules.decide("bash", {"command": "git status -s"}).decision == "allow"
    assert rules.decide("bash", {"command": "git status; rm -rf /"}).decision == "deny"
    assert rules.decide("bash", {"command": "ls"}).decision is None
    assert len(Composition.load().rules) == 0


def test_a_bad_rules_file_names_the_config_and_the_rule(tmp_path: pathlib.Path) -> None:
    (tmp_path / "rules.toml").write_text('[[rules]]\ndecision = "allow"\n')
    config = tmp_path / "broker.toml"
    config.write_text('rules = ["rules.toml"]\n')
    with pytest.raises(
        CompositionError,
        match=rf"^config '{config}': rules: rules file {tmp_path / 'rules.toml'}: rule 1: "
        r"tool must be a glob on the tool name, got None",
    ):
        Composition.load(config)


def test_always_for_is_a_setting_in_seconds(tmp_path: pathlib.Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text("allow_always = true\nalways_for = 1800\n")
    loaded = Composition.load(config)
    assert (loaded.allow_always, loaded.always_for) == (True, 1800.0)
    assert Composition.load().always_for is None
    config.write_text("always_for = 0\n")
    with pytest.raises(CompositionError, match=r"always_for: expected a finite number of seconds"):
        Composition.load(config)
