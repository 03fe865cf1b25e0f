"""``Bounds``: which mechanism bounds a command, and the cgroups it makes and removes."""

from __future__ import annotations

import pathlib
import subprocess

import pytest

from broker.tools import Bounds


def test_nothing_writable_and_root_says_no_process_limit() -> None:
    bounds = Bounds(root=True)
    assert not bounds.limits_processes
    assert bounds.describe() == (
        "no process limit (no writable pids cgroup, and RLIMIT_NPROC does not bind root); "
        "no memory limit (no writable memory cgroup and no prlimit); "
        "tmpfs size= on /tmp and /dev/shm"
    )
    assert bounds.create(max_processes=8, memory_limit=1 << 20) is None
    assert bounds.rlimit_argv(max_processes=8, memory_limit=1 << 20) == []


def test_prlimit_bounds_processes_only_when_not_root() -> None:
    as_user = Bounds(prlimit="/usr/bin/prlimit", root=False)
    assert as_user.limits_processes
    assert as_user.rlimit_argv(max_processes=8, memory_limit=4096) == [
        "/usr/bin/prlimit",
        "--nproc=8",
        "--data=4096",
        "--",
    ]
    as_root = Bounds(prlimit="/usr/bin/prlimit", root=True)
    assert not as_root.limits_processes
    assert as_root.rlimit_argv(max_processes=8, memory_limit=4096) == [
        "/usr/bin/prlimit",
        "--data=4096",
        "--",
    ]


def test_a_command_cgroup_holds_limits_and_is_removed() -> None:
    bounds = Bounds.detect()
    if bounds.v2_parent is None and bounds.pids_parent is None:
        pytest.skip(f"no writable pids cgroup here: {bounds.describe()}")
    group = bounds.create(max_processes=7, memory_limit=64 << 20)
    assert group is not None
    try:
        pids = next(d for d in group.directories if (d / "pids.max").exists())
        assert (pids / "pids.max").read_text().strip() == "7"
        done = subprocess.run(
            [*group.join_argv(), "cat", "/proc/self/cgroup"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        assert pids.name in done.stdout
    finally:
        assert group.kill()
        assert group.remove()
    assert not any(pathlib.Path(d).exists() for d in group.directories)


def test_a_failing_join_never_runs_the_command(tmp_path: pathlib.Path) -> None:
    from broker.tools._cgroup import CommandCgroup

    group = CommandCgroup(directories=(tmp_path / "missing",), v2=True)
    done = subprocess.run(
        [*group.join_argv(), "touch", str(tmp_path / "ran")],
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert done.returncode == 125
    assert not (tmp_path / "ran").exists()
