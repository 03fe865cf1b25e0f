"""A chaos harness that runs seeded faults against a live broker and checks its invariants."""

from ._harness import ChaosReport as ChaosReport
from ._harness import run_chaos as run_chaos
from ._plan import ChaosConfig as ChaosConfig

__all__ = ["ChaosConfig", "ChaosReport", "run_chaos"]
