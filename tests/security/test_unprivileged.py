"""The whole security suite again, as an unprivileged user (uid 65534), when we are root.

Agents run as root and as ordinary users; the sandbox must hold both ways. Started as root,
this re-runs ``tests/security`` under ``setpriv`` as nobody and fails if any test there fails.
Started as an ordinary user, the suite above already runs unprivileged and this is skipped.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import sys
import tempfile

import pytest
import trio

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).parents[2]
NOBODY = 65534
INNER = "BROKER_SECURITY_UNPRIVILEGED"


@pytest.mark.skipif(os.environ.get(INNER) == "1", reason="already the unprivileged run")
@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: the suite ran as this user")
async def test_the_security_suite_holds_as_an_unprivileged_user() -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux) to drop to an unprivileged uid")
    with tempfile.TemporaryDirectory(prefix="broker-unpriv-") as base:
        os.chown(base, NOBODY, NOBODY)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": base,
            "LANG": "C.UTF-8",
            INNER: "1",
        }
        argv = [
            setpriv,
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--inh-caps=-all",
            sys.executable,
            "-W",
            "error",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--basetemp={base}/pytest",
            "tests/security",
        ]
        with trio.fail_after(100):
            done = await trio.run_process(
                argv, cwd=ROOT, env=env, check=False, capture_stdout=True, capture_stderr=True
            )
    report = done.stdout.decode(errors="replace") + done.stderr.decode(errors="replace")
    if done.returncode == 5 or "ModuleNotFoundError" in report:
        pytest.skip(f"uid {NOBODY} cannot run this checkout's python: {report[-300:]}")
    assert done.returncode == 0, report
    # Only the planted /run socket (root-only) and this test itself may skip as nobody; a
    # sandbox fixture that skipped everything would otherwise pass silently.
    summary = report.strip().splitlines()[-1]
    match = re.search(r"(\d+) passed(?:, (\d+) skipped)?", summary)
    assert match is not None, report
    assert int(match.group(2) or 0) <= 3, report
