"""Tools and the tool runtime: gates, ask routing, and the sandboxed ``bash`` tool."""

# Explicit: what a user may import from this subpackage.
# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._bash import SANDBOX_MODE as SANDBOX_MODE
from ._bash import BashTool as BashTool
from ._bash import sandbox_context as sandbox_context
from ._call import CallContext as CallContext
from ._call import ToolCall as ToolCall
from ._call import ToolResult as ToolResult
from ._call import ToolSpec as ToolSpec
from ._cgroup import Bounds as Bounds
from ._cgroup import CommandCgroup as CommandCgroup
from ._environment import EnvironmentPolicy as EnvironmentPolicy
from ._gate import Allow as Allow
from ._gate import Ask as Ask
from ._gate import Deny as Deny
from ._gate import GateDecision as GateDecision
from ._runtime import Gate as Gate
from ._runtime import GateNext as GateNext
from ._runtime import Tool as Tool
from ._runtime import ToolRuntime as ToolRuntime
from .sandbox import DEFAULT_PROTECTED_PATHS as DEFAULT_PROTECTED_PATHS
from .sandbox import ESCALATION_HINT as ESCALATION_HINT
from .sandbox import BubblewrapExecutor as BubblewrapExecutor
from .sandbox import CommandLimits as CommandLimits
from .sandbox import CommandResult as CommandResult
from .sandbox import PlainExecutor as PlainExecutor
from .sandbox import SandboxMode as SandboxMode
from .sandbox import SandboxUnavailableError as SandboxUnavailableError
from .sandbox import denial_marker as denial_marker

__all__ = [
    "DEFAULT_PROTECTED_PATHS",
    "ESCALATION_HINT",
    "Allow",
    "Ask",
    "BashTool",
    "Bounds",
    "BubblewrapExecutor",
    "CallContext",
    "CommandLimits",
    "CommandResult",
    "Deny",
    "EnvironmentPolicy",
    "Gate",
    "GateDecision",
    "GateNext",
    "PlainExecutor",
    "SandboxMode",
    "SandboxUnavailableError",
    "Tool",
    "ToolCall",
    "ToolResult",
    "ToolRuntime",
    "ToolSpec",
    "denial_marker",
    "sandbox_context",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
