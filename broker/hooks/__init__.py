"""Claude Code ``PreToolUse`` command hooks as a fail-closed pre-execute gate (contract §8.3)."""

from ._bridge import DEFAULT_DENY_REASON as DEFAULT_DENY_REASON
from ._bridge import HookBridge as HookBridge
from ._bridge import HookCall as HookCall
from ._gate import HookGate as HookGate
from ._runner import OUTPUT_CAP as OUTPUT_CAP
from ._runner import HookVerdict as HookVerdict
from ._settings import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._settings import PROJECT_TOOLS as PROJECT_TOOLS
from ._settings import CommandHook as CommandHook
from ._settings import HookMatcher as HookMatcher
from ._settings import HookSettings as HookSettings
from ._settings import HookSettingsError as HookSettingsError

__all__ = [
    "DEFAULT_DENY_REASON",
    "DEFAULT_TIMEOUT",
    "OUTPUT_CAP",
    "CommandHook",
    "HookBridge",
    "HookCall",
    "HookGate",
    "HookMatcher",
    "HookSettings",
    "HookSettingsError",
    "HookVerdict",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
