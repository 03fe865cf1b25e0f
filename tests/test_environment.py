"""``EnvironmentPolicy``: an allowlist, and names that look like secrets never by accident."""

from __future__ import annotations

import pytest

from broker.tools import EnvironmentPolicy

HOST = {
    "PATH": "/usr/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C",
    "TERM": "xterm",
    "OPENAI_API_KEY": "sk-1",
    "GITHUB_TOKEN": "ghp",
    "PGPASSWORD": "pw",
    "AWS_SECRET_ACCESS_KEY": "aws",
    "AWS_REGION": "eu",
    "EDITOR": "vim",
    "LC_SECRET_THING": "x",
}


def test_the_default_passes_the_allowlist_only() -> None:
    assert EnvironmentPolicy().build(HOST) == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "TERM": "xterm",
    }


def test_a_secret_looking_name_needs_both_inherit_and_allow_secrets() -> None:
    inherit_all = EnvironmentPolicy(inherit=("*",))
    assert "OPENAI_API_KEY" not in inherit_all.build(HOST)
    assert "AWS_REGION" not in inherit_all.build(HOST)  # cloud credential prefix
    assert "EDITOR" in inherit_all.build(HOST)
    allowed = EnvironmentPolicy(inherit=("*",), allow_secrets=("OPENAI_API_KEY",))
    assert allowed.build(HOST)["OPENAI_API_KEY"] == "sk-1"
    assert "GITHUB_TOKEN" not in allowed.build(HOST)
    not_inherited = EnvironmentPolicy(allow_secrets=("OPENAI_API_KEY",))
    assert "OPENAI_API_KEY" not in not_inherited.build(HOST)


def test_set_values_apply_last_and_unfiltered() -> None:
    policy = EnvironmentPolicy(set={"HOME": "/work", "CI_TOKEN": "chosen"})
    env = policy.build(HOST)
    assert env["HOME"] == "/work"
    assert env["CI_TOKEN"] == "chosen"


@pytest.mark.parametrize("name", ["inherit", "allow_secrets"])
def test_a_bare_string_is_refused_naming_the_parameter(name: str) -> None:
    with pytest.raises(
        ValueError,
        match=rf"^{name} must be a tuple of variable names or patterns, got 'PATH': "
        r"pass e\.g\. \(\"PATH\", \"LC_\*\"\)$",
    ):
        EnvironmentPolicy(**{name: "PATH"})  # type: ignore[arg-type]
