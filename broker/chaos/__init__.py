"""A chaos harness that runs seeded faults against a live broker and checks its invariants."""

# For the other packages of broker (their front door into this one); not part of the
# public API, so not in __all__.
from ._harness import REAL_QUIET as REAL_QUIET
from ._harness import REAL_TIME_SCALE as REAL_TIME_SCALE
from ._harness import ChaosReport as ChaosReport
from ._harness import run_chaos as run_chaos
from ._plan import ChaosConfig as ChaosConfig

__all__ = ["ChaosConfig", "ChaosReport", "run_chaos"]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
