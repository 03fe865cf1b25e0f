"""A composed agent: the settings and parts that ``broker acp`` (and tests) put together.

One :class:`Composition` builds, for each session, an :class:`AgentLoop` with its own scripted
model, a ``bash`` tool working in the session's directory (sandboxed unless the composition says
otherwise), and the Claude-Code hook gate when hook settings are given.
"""

from __future__ import annotations

import enum
import json
import math
import pathlib
import tomllib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NewType, TypeVar

import attrs
import cattrs
import trio

from ._cattrs_errors import STRUCTURE_ERRORS, StructureProblem, path_first, problems
from ._errors import BrokerError
from ._vocabulary import Delegation, Policy
from .agent import AgentLoop, LoopObserver, Scenario, ScriptedModel
from .hooks import HookBridge, HookGate, HookSettings
from .rules import Layer, Rule, RuleSet, RulesFileError, claude_code_permissions, load_rules
from .scenarios import scenario_path
from .store import (
    ACCEPTED_STORE_FORMS,
    PostgresUrl,
    StoreUrlError,
    parse_store_url,
    redact_dsn,
)
from .tools import (
    BashTool,
    BubblewrapExecutor,
    CommandLimits,
    PlainExecutor,
    SandboxMode,
    ToolRuntime,
)

if TYPE_CHECKING:
    from ._broker import Broker
    from ._session import Session
    from .tools import Gate

__all__ = ["Composition", "CompositionError"]

DEFAULT_PERMISSION_DEADLINE = 300.0


class CompositionError(BrokerError, ValueError):
    """A composition setting is invalid; the message names the setting and the fix."""


@attrs.frozen(kw_only=True)
class Composition:
    """Deployment settings of a composed agent.

    ``sandbox`` is the default mode of every session's ``bash`` tool, or ``"none"`` for no
    sandbox at all (every command runs unconfined; escalation is unavailable). ``store`` is the
    log: a SQLite file path, a PostgreSQL URL (``postgresql://…``, a string), or ``None`` (in
    memory). ``permission_deadline`` bounds how long the ACP
    answerer waits for a client's answer before the question resolves ``unavailable``.
    ``remote_answers`` lets a question also be answered from elsewhere (``broker answer``, the
    store's answer board) while the client is asked: the first answer wins.
    """

    policy: Policy = Policy.ASK
    delegation: Delegation = Delegation.PIN_NEVER
    sandbox: SandboxMode | None = SandboxMode.READ_ONLY
    scenario: Scenario
    store: pathlib.Path | str | None = None
    hooks: HookSettings | None = None
    #: The rules of every question (``rules`` files, and the ``permissions`` of the hooks'
    #: Claude Code settings file).
    rules: RuleSet = attrs.field(factory=RuleSet)
    permission_deadline: float = DEFAULT_PERMISSION_DEADLINE
    allow_always: bool = False
    #: How long a grant given by "always allow" lasts (seconds; None: as long as the session).
    always_for: float | None = None
    #: The project rules file "always allow, in this project" appends to (its rules, when it
    #: exists, are in ``rules``).
    project_rules: pathlib.Path | None = None
    remote_answers: bool = False
    max_steps: int = 32
    command_time_limit: float = 30.0

    @classmethod
    def load(
        cls,
        path: pathlib.Path | None = None,
        *,
        default_store: pathlib.Path | None = None,
        **overrides: Any,
    ) -> Composition:
        """Read a TOML composition file (optional), then apply *overrides* (CLI flags).

        Keys: ``policy``, ``delegation``, ``sandbox``, ``scenario`` (a file path or a built-in
        name), ``store`` (a file path, ``sqlite:///PATH`` or ``postgresql://…``), ``hooks`` (a
        Claude Code settings file: its ``PreToolUse`` hooks run, its ``permissions`` are
        rules), ``rules`` (a list of rules files, :mod:`broker.rules`), ``permission_deadline``,
        ``allow_always``, ``always_for`` (seconds a grant "always allow" gives lasts),
        ``project_rules`` (the project's rules file: read as rules when it exists, and where
        "always allow, in this project" writes), ``remote_answers``, ``max_steps``,
        ``command_time_limit``. Relative paths in the file are resolved against the file's
        directory. *default_store* applies when neither the file
        nor the overrides name a store (``":memory:"`` names none).

        A bad value raises :class:`CompositionError` naming the file, the key and what is
        expected, e.g. ``config 'a.toml': max_steps: expected a whole number of at least 1,
        got 0``; numbers of seconds must be finite and above 0 (``inf`` and ``nan`` are refused).
        """
        raw: dict[str, Any] = {}
        base = pathlib.Path.cwd()
        source = "settings"
        if path is not None:
            source = f"config {str(path)!r}"
            try:
                raw = tomllib.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise CompositionError(
                    f"{source} cannot be read: {exc.strerror or exc}; pass an existing TOML file"
                ) from exc
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise CompositionError(f"{source} is not valid TOML: {exc}") from exc
            base = path.resolve().parent
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if "store" not in raw and default_store is not None:
            raw["store"] = str(default_store)
        try:
            settings = _settings_converter.structure(raw, _Settings)
        except STRUCTURE_ERRORS as exc:
            found = "; ".join(path_first(p) for p in problems(exc, wire_names=False))
            raise CompositionError(f"{source}: {found}") from exc
        return settings.compose(base, source)

    async def executor(self) -> BubblewrapExecutor | PlainExecutor:
        """The command executor; probes bubblewrap at start-up when a sandbox is composed.

        Raises :class:`SandboxUnavailableError` (with why and how to fix) when it cannot run.
        Cancellation: the probe's process is killed.
        """
        if self.sandbox is None:
            await trio.lowlevel.checkpoint()
            return PlainExecutor()
        return await BubblewrapExecutor.probe()

    def build_loop(
        self,
        *,
        broker: Broker,
        session: Session,
        workspace: pathlib.Path,
        executor: BubblewrapExecutor | PlainExecutor,
        observer: LoopObserver | None = None,
    ) -> AgentLoop:
        """One session's agent loop: its own scripted model, bash in *workspace*, the hooks."""
        bash = BashTool(
            executor=executor,
            workspace=workspace,
            default_mode=self.sandbox or SandboxMode.DANGER_FULL_ACCESS,
            limits=CommandLimits(time_limit=self.command_time_limit),
        )
        gates: list[Gate] = []
        if self.hooks is not None:
            gates.append(HookGate(bridge=HookBridge(settings=self.hooks), cwd=workspace))
        runtime = ToolRuntime(tools=[bash], gates=gates, approval=broker)
        return AgentLoop(
            broker=broker,
            session=session,
            model=ScriptedModel(self.scenario),
            runtime=runtime,
            max_steps=self.max_steps,
            observer=observer or LoopObserver(),
        )


# -- the settings as given, structured by cattrs ------------------------------------------------

#: A positive, finite number of seconds (TOML allows ``inf`` and ``nan``; a bound must not be).
Seconds = NewType("Seconds", float)
#: A whole number, at least 1.
Count = NewType("Count", int)
#: A path as written (relative ones are resolved against the config file's directory).
PathText = NewType("PathText", str)
#: A store as written: a path (resolved like :data:`PathText`), ``sqlite:///PATH``,
#: ``postgresql://…``, or ``":memory:"``.
StoreText = NewType("StoreText", str)
#: A :class:`SandboxMode` value, or ``"none"`` for no sandbox.
SandboxChoice = NewType("SandboxChoice", str)

_NO_SANDBOX = "none"
E = TypeVar("E", bound=enum.Enum)


@attrs.frozen(kw_only=True)
class _Settings:
    """The keys of a composition file (and the CLI flags over them), as given.

    Structured by :data:`_settings_converter`, so a bad value is refused with its key's name;
    :meth:`compose` then resolves the paths and reads the scenario and hooks files.
    """

    policy: Policy = Policy.ASK
    delegation: Delegation = Delegation.PIN_NEVER
    sandbox: SandboxChoice = SandboxChoice(SandboxMode.READ_ONLY.value)
    scenario: PathText = PathText("escalation")
    store: StoreText | None = None
    hooks: PathText | None = None
    rules: list[PathText] = attrs.field(factory=list)
    permission_deadline: Seconds = Seconds(DEFAULT_PERMISSION_DEADLINE)
    allow_always: bool = False
    always_for: Seconds | None = None
    project_rules: PathText | None = None
    remote_answers: bool = False
    max_steps: Count = Count(32)
    command_time_limit: Seconds = Seconds(30.0)

    def compose(self, base: pathlib.Path, source: str) -> Composition:
        """The composition: paths resolved against *base*, scenario and hooks files read."""

        def resolve(value: str) -> pathlib.Path:
            given = pathlib.Path(value).expanduser()
            return given if given.is_absolute() else base / given

        if "/" not in self.scenario and "." not in self.scenario:
            try:
                scenario_file = scenario_path(self.scenario)
            except ValueError as exc:
                raise CompositionError(f"{source}: scenario: {exc}") from None
        else:
            scenario_file = resolve(self.scenario)
        return Composition(
            policy=self.policy,
            delegation=self.delegation,
            sandbox=None if self.sandbox == _NO_SANDBOX else SandboxMode(self.sandbox),
            scenario=Scenario.from_file(scenario_file),
            store=self._store(resolve),
            hooks=HookSettings.from_file(resolve(self.hooks)) if self.hooks else None,
            rules=self._rules(resolve, source),
            permission_deadline=self.permission_deadline,
            allow_always=self.allow_always,
            always_for=self.always_for,
            project_rules=resolve(self.project_rules) if self.project_rules else None,
            remote_answers=self.remote_answers,
            max_steps=self.max_steps,
            command_time_limit=self.command_time_limit,
        )

    def _rules(self, resolve: Callable[[str], pathlib.Path], source: str) -> RuleSet:
        rules: list[Rule] = []
        try:
            for file in self.rules:
                rules.extend(load_rules(resolve(file), Layer.PROJECT))
            project = resolve(self.project_rules) if self.project_rules else None
            if project is not None and project.exists() and self.project_rules not in self.rules:
                rules.extend(load_rules(project, Layer.PROJECT))
            if self.hooks:
                rules.extend(claude_code_permissions(resolve(self.hooks)))
        except RulesFileError as exc:
            raise CompositionError(f"{source}: rules: {exc}") from None
        return RuleSet(rules)

    def _store(self, resolve: Callable[[str], pathlib.Path]) -> pathlib.Path | str | None:
        if self.store in (None, "", ":memory:"):
            return None
        where = parse_store_url(self.store)  # checked when structured: cannot fail here
        return where.dsn if isinstance(where, PostgresUrl) else resolve(where.path)


def _shown(value: object) -> str:
    """A settings value as the user wrote it (TOML strings in double quotes)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _choice(values: list[str]) -> Callable[[object, Any], str]:
    expected = ", ".join(f'"{value}"' for value in values)

    def structure(value: object, _type: Any) -> str:
        if not isinstance(value, str) or value not in values:
            raise StructureProblem(f"expected one of {expected}, got {_shown(value)}")
        return value

    return structure


def _seconds(value: object, _type: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise StructureProblem(f"expected a finite number of seconds above 0, got {_shown(value)}")
    return float(value)


def _count(value: object, _type: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StructureProblem(f"expected a whole number of at least 1, got {_shown(value)}")
    return value


def _path(value: object, _type: Any) -> str:
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if not isinstance(value, str):
        raise StructureProblem(f"expected a path (a string), got {_shown(value)}")
    return value


def _store(value: object, type_: Any) -> str:
    text = _path(value, type_)
    if text in ("", ":memory:"):
        return text
    try:
        parse_store_url(text)
    except StoreUrlError:
        raise StructureProblem(
            f'expected ":memory:", {ACCEPTED_STORE_FORMS}, got {_shown(redact_dsn(text))}'
        ) from None
    return text


def _boolean(value: object, _type: Any) -> bool:
    if not isinstance(value, bool):
        raise StructureProblem(f"expected true or false, got {_shown(value)}")
    return value


def _enum(kind: type[E]) -> Callable[[object, Any], E]:
    check = _choice([str(member.value) for member in kind])

    def structure(value: object, type_: Any) -> E:
        return kind(check(value, type_))

    return structure


def _make_settings_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(Policy, _enum(Policy))
    converter.register_structure_hook(Delegation, _enum(Delegation))
    converter.register_structure_hook(
        SandboxChoice, _choice([mode.value for mode in SandboxMode] + [_NO_SANDBOX])
    )
    converter.register_structure_hook(Seconds, _seconds)
    converter.register_structure_hook(Count, _count)
    converter.register_structure_hook(PathText, _path)
    converter.register_structure_hook(StoreText, _store)
    converter.register_structure_hook(bool, _boolean)
    return converter


_settings_converter = _make_settings_converter()
