"""A composed agent: the settings and parts that ``broker acp`` (and tests) put together.

One :class:`Composition` builds, for each session, an :class:`AgentLoop` with its own scripted
model, a ``bash`` tool working in the session's directory (sandboxed unless the composition says
otherwise), and the Claude-Code hook gate when hook settings are given.
"""

from __future__ import annotations

import pathlib
import tomllib
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._errors import BrokerError
from ._vocabulary import Delegation, Policy, parse_policy
from .agent._loop import AgentLoop, LoopObserver
from .agent._scripted import Scenario, ScriptedModel
from .hooks._bridge import HookBridge
from .hooks._gate import HookGate
from .hooks._settings import HookSettings
from .scenarios import scenario_path
from .tools._bash import BashTool
from .tools._runtime import ToolRuntime
from .tools._sandbox import BubblewrapExecutor, CommandLimits, PlainExecutor, SandboxMode

if TYPE_CHECKING:
    from ._broker import Broker
    from ._session import Session
    from .tools._runtime import Gate

__all__ = ["Composition", "CompositionError"]

DEFAULT_PERMISSION_DEADLINE = 300.0

_KEYS = {
    "policy",
    "delegation",
    "sandbox",
    "scenario",
    "store",
    "hooks",
    "permission_deadline",
    "allow_always",
    "max_steps",
    "command_time_limit",
}


class CompositionError(BrokerError, ValueError):
    """A composition setting is invalid; the message names the setting and the fix."""


@attrs.frozen(kw_only=True)
class Composition:
    """Deployment settings of a composed agent.

    ``sandbox`` is the default mode of every session's ``bash`` tool, or ``"none"`` for no
    sandbox at all (every command runs unconfined; escalation is unavailable). ``store`` is the
    SQLite log path (``None``: in memory). ``permission_deadline`` bounds how long the ACP
    answerer waits for a client's answer before the question resolves ``unavailable``.
    """

    policy: Policy = Policy.ASK
    delegation: Delegation = Delegation.PIN_NEVER
    sandbox: SandboxMode | None = SandboxMode.READ_ONLY
    scenario: Scenario
    store: pathlib.Path | None = None
    hooks: HookSettings | None = None
    permission_deadline: float = DEFAULT_PERMISSION_DEADLINE
    allow_always: bool = False
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
        name), ``store``, ``hooks`` (a Claude Code settings file), ``permission_deadline``,
        ``allow_always``, ``max_steps``, ``command_time_limit``. Relative paths in the file are
        resolved against the file's directory. *default_store* applies when neither the file
        nor the overrides name a store (``":memory:"`` names none).
        """
        raw: dict[str, Any] = {}
        base = pathlib.Path.cwd()
        if path is not None:
            try:
                raw = tomllib.loads(path.read_text(encoding="utf-8"))
            except OSError as exc:
                raise CompositionError(
                    f"config {str(path)!r} cannot be read: {exc.strerror or exc}; pass an "
                    "existing TOML file"
                ) from exc
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise CompositionError(f"config {str(path)!r} is not valid TOML: {exc}") from exc
            base = path.resolve().parent
            unknown = sorted(set(raw) - _KEYS)
            if unknown:
                raise CompositionError(
                    f"config {str(path)!r} has unknown keys {unknown}: expected some of "
                    f"{sorted(_KEYS)}"
                )
        raw.update({k: v for k, v in overrides.items() if v is not None})
        if "store" not in raw and default_store is not None:
            raw["store"] = str(default_store)
        return cls._from_raw(raw, base)

    @classmethod
    def _from_raw(cls, raw: dict[str, Any], base: pathlib.Path) -> Composition:
        def resolve(value: object, key: str) -> pathlib.Path:
            if not isinstance(value, str | pathlib.Path):
                raise CompositionError(f"{key} must be a path, got {value!r}")
            given = pathlib.Path(value).expanduser()
            return given if given.is_absolute() else base / given

        try:
            policy = parse_policy(raw.get("policy", "ask"))
        except (ValueError, TypeError) as exc:
            raise CompositionError(str(exc)) from None
        try:
            delegation = Delegation(raw.get("delegation", "pin-never"))
        except ValueError:
            raise CompositionError(
                f'delegation must be one of "pin-never" or "inherit", got {raw.get("delegation")!r}'
            ) from None
        sandbox_raw = raw.get("sandbox", SandboxMode.READ_ONLY.value)
        sandbox: SandboxMode | None
        if sandbox_raw == "none":
            sandbox = None
        else:
            try:
                sandbox = SandboxMode(sandbox_raw)
            except ValueError:
                raise CompositionError(
                    f"sandbox must be one of read-only, workspace-write, danger-full-access or "
                    f"none, got {sandbox_raw!r}"
                ) from None
        scenario_raw = raw.get("scenario", "escalation")
        if isinstance(scenario_raw, str) and "/" not in scenario_raw and "." not in scenario_raw:
            try:
                scenario_file = scenario_path(scenario_raw)
            except ValueError as exc:
                raise CompositionError(f"scenario: {exc}") from None
        else:
            scenario_file = resolve(scenario_raw, "scenario")
        scenario = Scenario.from_file(scenario_file)
        store = (
            None if raw.get("store") in (None, "", ":memory:") else resolve(raw["store"], "store")
        )
        hooks = None
        if raw.get("hooks"):
            hooks = HookSettings.from_file(resolve(raw["hooks"], "hooks"))
        deadline = raw.get("permission_deadline", DEFAULT_PERMISSION_DEADLINE)
        if isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0:
            raise CompositionError(
                f"permission_deadline must be a positive number of seconds, got {deadline!r}: "
                f"the default is {DEFAULT_PERMISSION_DEADLINE:g}"
            )
        allow_always = raw.get("allow_always", False)
        if not isinstance(allow_always, bool):
            raise CompositionError(f"allow_always must be true or false, got {allow_always!r}")
        max_steps = raw.get("max_steps", 32)
        if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
            raise CompositionError(f"max_steps must be a positive integer, got {max_steps!r}")
        limit = raw.get("command_time_limit", 30.0)
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise CompositionError(
                f"command_time_limit must be a positive number of seconds, got {limit!r}"
            )
        return cls(
            policy=policy,
            delegation=delegation,
            sandbox=sandbox,
            scenario=scenario,
            store=store,
            hooks=hooks,
            permission_deadline=float(deadline),
            allow_always=allow_always,
            max_steps=max_steps,
            command_time_limit=float(limit),
        )

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
