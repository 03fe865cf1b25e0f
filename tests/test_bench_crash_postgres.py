"""``python -m bench.crash --store DSN``: the kill -9 loop holds its invariants on PostgreSQL
(issue 22 step 5): every acknowledged question found with its outcome after another process
took the killed sessions over, the log verified before and after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_the_crash_loop_on_postgres_finds_no_violation(postgres_dsn: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "bench.crash",
            "--kills",
            "3",
            "--store",
            postgres_dsn,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "violations: 0" in done.stdout
    assert "all found with their outcome: yes" in done.stdout
