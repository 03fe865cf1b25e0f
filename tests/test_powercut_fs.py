"""The power-cut filesystem (tests/powercut): what a cut keeps and what it throws away.

The model (design/powercut.md): a file's bytes survive as of its last fsync/fdatasync; a
directory's entries as of its last fsync of the directory; nothing else.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powercut import PowerCut, fuse_unavailable, powercut_mount, unmount_stale

pytestmark = [
    pytest.mark.skipif(fuse_unavailable() is not None, reason=f"{fuse_unavailable()}"),
    pytest.mark.timeout(60),
]


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[PowerCut]:
    unmount_stale()  # a mount an earlier, killed run left behind
    with powercut_mount(tmp_path) as mounted:
        yield mounted


def _write(path: Path, data: bytes, *, sync: bool = False, offset: int | None = None) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        if offset is None:
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, data)
        else:
            os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync(path: Path, *, data_only: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        (os.fdatasync if data_only else os.fsync)(fd)
    finally:
        os.close(fd)


def _durable_file(fs: PowerCut, name: str, data: bytes) -> Path:
    """A file whose bytes and name are both synced."""
    path = fs.mountpoint / name
    _write(path, data, sync=True)
    _fsync(fs.mountpoint)
    return path


def test_a_cut_keeps_exactly_the_bytes_synced_before_it(fs: PowerCut) -> None:
    path = _durable_file(fs, "log", b"synced-1;")
    _write(path, b"synced-2;", sync=True)
    _write(path, b"never-synced")
    _write(path, b"XX", offset=0)  # an unsynced overwrite of synced bytes
    assert path.read_bytes() == b"XXnced-1;synced-2;never-synced"  # live: everything
    fs.cut()
    report = fs.remount()
    assert path.read_bytes() == b"synced-1;synced-2;"
    assert report.cut_at is not None
    assert report.files_rolled_back == 1
    assert report.bytes_dropped == len(b"never-synced") + 2
    assert (fs.backing / "log").read_bytes() == b"synced-1;synced-2;"


def test_fdatasync_is_a_sync(fs: PowerCut) -> None:
    path = _durable_file(fs, "log", b"a")
    _write(path, b"b")
    _fsync(path, data_only=True)
    _write(path, b"c")
    fs.cut()
    fs.remount()
    assert path.read_bytes() == b"ab"


def test_a_truncate_not_synced_is_undone(fs: PowerCut) -> None:
    path = _durable_file(fs, "log", bytes(range(100)))
    os.truncate(path, 10)
    grown = _durable_file(fs, "grown", b"12345")
    os.truncate(grown, 4096)
    fs.cut()
    fs.remount()
    assert path.read_bytes() == bytes(range(100))
    assert grown.read_bytes() == b"12345"
    os.truncate(path, 10)
    _fsync(path)
    _write(path, b"after")
    fs.cut()
    fs.remount()
    assert path.read_bytes() == bytes(range(10))


def test_a_new_file_needs_its_directory_synced(fs: PowerCut) -> None:
    _write(fs.mountpoint / "synced-file-only", b"data", sync=True)
    _write(fs.mountpoint / "never-synced", b"data")
    fs.cut()
    fs.remount()
    assert os.listdir(fs.mountpoint) == []  # a file's own fsync never makes its name durable
    _write(fs.mountpoint / "name-only", b"data")
    _fsync(fs.mountpoint)
    fs.cut()
    fs.remount()
    assert (fs.mountpoint / "name-only").read_bytes() == b""  # the name, not the bytes


def test_a_rename_without_a_directory_sync_is_undone(fs: PowerCut) -> None:
    target = _durable_file(fs, "current", b"old")
    new = _durable_file(fs, "new.tmp", b"new")
    os.rename(new, target)  # the atomic-replace idiom, without its directory fsync
    assert target.read_bytes() == b"new"
    fs.cut()
    report = fs.remount()
    assert sorted(os.listdir(fs.mountpoint)) == ["current", "new.tmp"]
    assert target.read_bytes() == b"old"
    assert new.read_bytes() == b"new"
    assert report.entries_dropped == 2  # "current" and "new.tmp" each name another file
    os.rename(new, target)
    _fsync(fs.mountpoint)
    fs.cut()
    fs.remount()
    assert os.listdir(fs.mountpoint) == ["current"]
    assert target.read_bytes() == b"new"


def test_an_unlink_without_a_directory_sync_comes_back(fs: PowerCut) -> None:
    path = _durable_file(fs, "doomed", b"synced")
    _write(path, b"+unsynced")
    os.unlink(path)
    assert not path.exists()
    fs.cut()
    fs.remount()
    assert path.read_bytes() == b"synced"


def test_several_files_each_keep_their_own_last_sync(fs: PowerCut) -> None:
    whole = _durable_file(fs, "whole", b"all synced")
    part = _durable_file(fs, "part", b"synced")
    empty = _durable_file(fs, "empty", b"")
    _write(part, b" and not")
    _write(empty, b"never synced")
    _write(whole, b"!", sync=True)
    fs.cut()
    report = fs.remount()
    assert whole.read_bytes() == b"all synced!"
    assert part.read_bytes() == b"synced"
    assert empty.read_bytes() == b""
    assert report.files_rolled_back == 2


def test_a_folder_is_durable_only_through_its_parent(fs: PowerCut) -> None:
    folder = fs.mountpoint / "sub"
    folder.mkdir()
    _write(folder / "f", b"data", sync=True)
    _fsync(folder)  # its entries, but not its own name in the root
    fs.cut()
    fs.remount()
    assert not folder.exists()
    folder.mkdir()
    _write(folder / "f", b"data", sync=True)
    _fsync(folder)
    _fsync(fs.mountpoint)
    fs.cut()
    fs.remount()
    assert (folder / "f").read_bytes() == b"data"


def test_an_armed_cut_fails_that_operation_and_every_later_one(fs: PowerCut) -> None:
    path = _durable_file(fs, "log", b"")
    fs.arm(3)
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, b"1")
        os.fsync(fd)
        with pytest.raises(OSError, match="Input/output error"):
            os.write(fd, b"3")  # the third mutating operation: the power is gone
        with pytest.raises(OSError, match="Input/output error"):
            os.fsync(fd)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"1"  # reads still answer
    with pytest.raises(OSError, match="Input/output error"):
        _write(fs.mountpoint / "other", b"x")
    assert fs.is_cut
    fs.remount()
    assert path.read_bytes() == b"1"


def test_the_mount_works_again_after_a_cut_and_a_clean_remount_keeps_all(fs: PowerCut) -> None:
    path = _durable_file(fs, "log", b"one;")
    _write(path, b"lost;")
    fs.cut()
    fs.remount()
    _write(path, b"two;", sync=True)
    _write(path, b"kept by a clean unmount;")
    report = fs.remount()  # no cut: a clean shutdown
    assert report.cut_at is None
    assert report.bytes_dropped == 0
    assert path.read_bytes() == b"one;two;kept by a clean unmount;"
    _write(path, b"lost again")
    fs.cut()
    fs.remount()
    assert path.read_bytes() == b"one;two;kept by a clean unmount;"


def test_the_control_mode_keeps_what_was_not_synced(tmp_path: Path) -> None:
    with powercut_mount(tmp_path, drop=False) as fs:
        path = fs.mountpoint / "log"
        _write(path, b"never synced")
        fs.cut()
        fs.remount()
        assert path.read_bytes() == b"never synced"  # a kill -9: the page cache is written


def _sqlite_rows(fs: PowerCut, synchronous: str) -> tuple[int, int]:
    db = str(fs.mountpoint / f"{synchronous}.db")
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        for value in range(50):
            conn.execute("INSERT INTO t VALUES (?)", (value,))  # each its own transaction
        fs.cut()
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO t VALUES (-1)")
    finally:
        conn.close()
    fs.remount()
    conn = sqlite3.connect(db)
    try:
        (check,) = conn.execute("PRAGMA integrity_check").fetchone()
        assert check == "ok"
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name = 't'").fetchall()
        rows = conn.execute("SELECT count(*) FROM t").fetchone()[0] if tables else 0
    finally:
        conn.close()
    return 50, rows


def test_sqlite_wal_full_keeps_every_commit_and_normal_does_not(fs: PowerCut) -> None:
    committed, kept = _sqlite_rows(fs, "FULL")
    assert kept == committed
    committed, kept = _sqlite_rows(fs, "NORMAL")
    assert kept < committed  # WAL + NORMAL syncs only at checkpoints


def test_a_mount_whose_server_died_is_cleaned_up(tmp_path: Path) -> None:
    fs = PowerCut(tmp_path)
    try:
        os.kill(fs._proc.pid, signal.SIGKILL)
        fs._proc.wait(timeout=10)
        with pytest.raises(OSError, match="not connected") as dead:
            os.listdir(fs.mountpoint)
        assert dead.value.errno == errno.ENOTCONN
        assert str(fs.mountpoint) in unmount_stale()
        assert os.listdir(fs.mountpoint) == []  # the folder underneath again
    finally:
        fs._kill()
