"""The agent loop, the model protocol, and the scripted model."""

from ._history import conversation_from_log as conversation_from_log
from ._history import unfinished_text as unfinished_text
from ._loop import AgentLoop as AgentLoop
from ._loop import LoopObserver as LoopObserver
from ._loop import StopReason as StopReason
from ._loop import TurnResult as TurnResult
from ._model import ContextEntry as ContextEntry
from ._model import Message as Message
from ._model import Model as Model
from ._model import ModelRequest as ModelRequest
from ._model import ModelResponse as ModelResponse
from ._scripted import ExpectedMessage as ExpectedMessage
from ._scripted import Scenario as Scenario
from ._scripted import ScenarioError as ScenarioError
from ._scripted import ScenarioMismatchError as ScenarioMismatchError
from ._scripted import ScriptedModel as ScriptedModel

# Explicit: what a user may import from this subpackage.
__all__ = [
    "AgentLoop",
    "ContextEntry",
    "ExpectedMessage",
    "LoopObserver",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "Scenario",
    "ScenarioError",
    "ScenarioMismatchError",
    "ScriptedModel",
    "StopReason",
    "TurnResult",
    "conversation_from_log",
    "unfinished_text",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
