"""Which environment variables a command sees: an allowlist, and secrets never by accident.

Modelled on Codex's ``shell_environment_policy``: start from a small allowlist of names
(``inherit``), drop every name that looks like a secret unless it is listed in
``allow_secrets``, then apply ``set``. The defaults::

    inherit        PATH HOME USER LOGNAME SHELL LANG LANGUAGE LC_* TERM TZ COLORTERM NO_COLOR
    secret names   *KEY* *SECRET* *TOKEN* *PASSW* *CREDENTIAL* *AUTH* *COOKIE* *SESSION*
                   *PRIVATE* AWS_* AZURE_* GCP_* GOOGLE_* GH_* GITHUB_* *_PAT
    allow_secrets  (none)

Matching is case-insensitive ``fnmatch`` on the name.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping

import attrs

__all__ = ["DEFAULT_INHERIT", "SECRET_PATTERNS", "EnvironmentPolicy"]

DEFAULT_INHERIT: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "COLORTERM",
    "NO_COLOR",
)
"""Names (``fnmatch`` patterns) a command inherits by default."""

SECRET_PATTERNS: tuple[str, ...] = (
    "*KEY*",
    "*SECRET*",
    "*TOKEN*",
    "*PASSW*",
    "*CREDENTIAL*",
    "*AUTH*",
    "*COOKIE*",
    "*SESSION*",
    "*PRIVATE*",
    "AWS_*",
    "AZURE_*",
    "GCP_*",
    "GOOGLE_*",
    "GH_*",
    "GITHUB_*",
    "*_PAT",
)
"""Names that look like secrets: dropped even when inherited, unless named in ``allow_secrets``."""


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def _check_names(attribute: str, value: object) -> tuple[str, ...]:
    items = tuple(value) if isinstance(value, tuple | list) else None
    if items is None or not all(isinstance(v, str) and v for v in items):
        raise ValueError(
            f"{attribute} must be a tuple of variable names or patterns, got {value!r}: "
            'pass e.g. ("PATH", "LC_*")'
        )
    return tuple(str(v) for v in items)


def _check_inherit(value: object) -> tuple[str, ...]:
    return _check_names("inherit", value)


def _check_allow_secrets(value: object) -> tuple[str, ...]:
    return _check_names("allow_secrets", value)


@attrs.frozen(kw_only=True)
class EnvironmentPolicy:
    """How a command's environment is built from ours.

    ``inherit``: patterns of names passed through; ``allow_secrets``: exact names passed even
    though they look like secrets (they must also be inherited or set); ``set``: fixed
    values, applied last (a set value is never filtered: the composition chose it).
    """

    inherit: tuple[str, ...] = attrs.field(default=DEFAULT_INHERIT, converter=_check_inherit)
    allow_secrets: tuple[str, ...] = attrs.field(default=(), converter=_check_allow_secrets)
    set: Mapping[str, str] = attrs.field(factory=dict)

    def build(self, source: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for one command, from *source* (default: ``os.environ``)."""
        env = os.environ if source is None else source
        allowed = {name.upper() for name in self.allow_secrets}
        out = {
            name: value
            for name, value in env.items()
            if _matches(name, self.inherit)
            and (name.upper() in allowed or not _matches(name, SECRET_PATTERNS))
        }
        out.update(self.set)
        return out

    @staticmethod
    def looks_secret(name: str) -> bool:
        """Whether *name* matches :data:`SECRET_PATTERNS`."""
        return _matches(name, SECRET_PATTERNS)
