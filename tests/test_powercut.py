"""The broker survives power loss: the short run of ``bench.powercut``.

Seeded power cuts (tests/powercut: every byte and directory entry not synced is thrown away)
under the broker's real workload on a SQLite store; after each, the file opens and verifies,
recovery closes the tails, and every question whose ``request()`` returned is in the log with
its outcome. ``synchronous="NORMAL"`` must lose acknowledged questions under the same cuts
(the harness sees the difference), and must not when the cut keeps unsynced bytes, as a
kill -9 does (the difference is the dropping, nothing else).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.powercut import run_cuts
from tests.powercut import fuse_unavailable, powercut_mount, unmount_stale

pytestmark = [
    pytest.mark.skipif(fuse_unavailable() is not None, reason=f"{fuse_unavailable()}"),
    pytest.mark.slow,
    pytest.mark.timeout(180),
]


def test_no_acknowledged_question_is_lost_in_50_power_cuts(tmp_path: Path) -> None:
    unmount_stale()
    with powercut_mount(tmp_path) as fs:
        figures = run_cuts(fs, cuts=50, seed=40, synchronous="FULL")
    assert figures.problems == []
    assert (figures.lost, figures.failed_files) == (0, 0)
    assert figures.cuts == 50
    assert figures.armed_fired >= 45  # the cuts fell inside the workload
    assert figures.acknowledged >= 500
    assert figures.recovered_asks + figures.interrupted_turns > 0  # tails were left, and closed
    assert figures.bytes_dropped > 0


def test_synchronous_normal_loses_acknowledged_questions(tmp_path: Path) -> None:
    unmount_stale()
    with powercut_mount(tmp_path) as fs:
        figures = run_cuts(fs, cuts=5, seed=40, synchronous="NORMAL")
    assert figures.failed_files == 0  # consistent, only not durable
    assert figures.acknowledged > 0
    assert figures.lost >= 1


def test_normal_loses_nothing_when_the_cut_keeps_unsynced_bytes(tmp_path: Path) -> None:
    unmount_stale()
    with powercut_mount(tmp_path, drop=False) as fs:
        figures = run_cuts(fs, cuts=5, seed=40, synchronous="NORMAL")
    assert figures.problems == []
    assert figures.acknowledged > 0
    assert (figures.lost, figures.failed_files) == (0, 0)
