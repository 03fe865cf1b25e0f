"""``python -m broker_hook claude-code|codex``: the hook without the console script."""

from __future__ import annotations

import sys

from . import run

sys.exit(run(sys.argv[1:]))
