"""A power-cut filesystem for the tests: a FUSE mount that forgets what was not synced.

    with powercut_mount(scratch) as fs:       # scratch/mnt, over scratch/backing
        ...write through fs.mountpoint...
        fs.arm(120)                           # the power goes at the 120th mutating operation
        fs.cut()                              # ... or now
        report = fs.remount()                 # power back: only what was synced is there

It runs in a server process of its own (``tests.powercut._server``, pyfuse3 on trio), so the
process under test may read and write the mount from any thread, and a cut falls between two
filesystem operations. What a cut keeps and drops — file bytes as of each file's last
``fsync``/``fdatasync``, directory entries as of each directory's last ``fsync`` — is stated
in :mod:`tests.powercut._fs` and design/powercut.md.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CutReport",
    "PowerCut",
    "PowerCutError",
    "fuse_unavailable",
    "powercut_mount",
    "unmount_stale",
]

_ROOT = Path(__file__).resolve().parents[2]
_FSTYPE = "fuse.powercut"


class PowerCutError(RuntimeError):
    """The filesystem's server failed or did not answer."""


@dataclass(frozen=True)
class CutReport:
    """One mount's end: how many mutating operations it saw, where the cut fell (None: no cut,
    a clean unmount) and what the power loss dropped."""

    ops: int
    synced: int
    cut_at: int | None
    files_rolled_back: int
    bytes_dropped: int
    entries_dropped: int

    @classmethod
    def of(cls, reply: dict[str, Any]) -> CutReport:
        loss = reply["loss"]
        return cls(
            ops=reply["ops"],
            synced=reply["synced"],
            cut_at=reply["cut_at"],
            files_rolled_back=loss["files_rolled_back"],
            bytes_dropped=loss["bytes_dropped"],
            entries_dropped=loss["entries_dropped"],
        )


def fuse_unavailable() -> str | None:
    """Why a FUSE filesystem cannot be mounted here, or None when it can be tried."""
    if not sys.platform.startswith("linux"):
        return f"FUSE mounts are Linux-only here (this is {sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (a container without the FUSE device?)"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "not root and no fusermount3 (Debian package fuse3)"
    return None


def _mounts() -> list[tuple[str, str]]:
    """(mountpoint, fstype) of every mount this process sees."""
    found = []
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) >= 3:
                point = fields[1].encode().decode("unicode_escape")  # \040 for a space
                found.append((point, fields[2]))
    return found


def _force_unmount(mountpoint: str) -> None:
    if os.geteuid() == 0:
        subprocess.run(["umount", "-l", mountpoint], check=False, capture_output=True)
    else:
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False, capture_output=True)


def unmount_stale(under: Path | None = None) -> list[str]:
    """Unmount power-cut mounts whose server is gone (the mount answers ENOTCONN), or every
    power-cut mount below *under*. Returns the mountpoints unmounted."""
    gone = []
    for point, fstype in _mounts():
        if fstype != _FSTYPE:
            continue
        inside = under is not None and Path(point).is_relative_to(under)
        if not inside:
            try:
                os.stat(point)
                continue  # alive: another test's, or another process's
            except OSError:
                pass
        _force_unmount(point)
        gone.append(point)
    return gone


class PowerCut:
    """A mounted power-cut filesystem: its server process and its folders."""

    def __init__(self, scratch: Path, *, drop: bool = True, timeout: float = 30.0) -> None:
        self.scratch = scratch
        self.backing = scratch / "backing"
        self.mountpoint = scratch / "mnt"
        self.timeout = timeout
        for folder in (self.backing, self.mountpoint):
            folder.mkdir(parents=True, exist_ok=True)
        self._log_path = scratch / "powercut-server.log"
        command = [sys.executable]
        command += [f"-W{option}" for option in sys.warnoptions]
        command += ["-m", "tests.powercut._server"]
        command += [str(self.backing), str(scratch / "attic"), str(self.mountpoint)]
        if not drop:
            command.append("--keep-unsynced")
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                command, cwd=_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
        self._buffer = b""
        self._closed = False
        try:
            self._expect("ready")
        except BaseException:
            self._kill()
            raise

    # -- the protocol --------------------------------------------------------------------

    def _server_log(self) -> str:
        try:
            text = self._log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-3000:]

    def _read_reply(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PowerCutError(f"the power-cut server did not answer in {self.timeout}s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self._proc.wait(timeout=self.timeout)
                    raise PowerCutError(
                        f"the power-cut server exited ({self._proc.returncode}):\n"
                        + self._server_log()
                    )
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise PowerCutError(reply["error"])
        return reply

    def _expect(self, key: str) -> dict[str, Any]:
        reply = self._read_reply()
        if key not in reply:
            raise PowerCutError(f"the power-cut server answered {reply}, expected {key!r}")
        return reply

    def _command(self, line: str, key: str = "ok") -> dict[str, Any]:
        if self._closed:
            raise PowerCutError("the power-cut filesystem is closed")
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise PowerCutError("the power-cut server is gone:\n" + self._server_log()) from None
        return self._expect(key)

    # -- the controls --------------------------------------------------------------------

    def arm(self, ops: int) -> None:
        """Cut the power at the *ops*-th mutating operation (write, truncate, sync, create,
        unlink, rename, mkdir, rmdir) from now: it and every later one fail with EIO."""
        self._command(f"arm {int(ops)}")

    def cut(self) -> int:
        """Cut the power now (nothing if it already is); the operation count at the cut."""
        cut_at: int = self._command("cut")["cut_at"]
        return cut_at

    def status(self) -> dict[str, Any]:
        """``ops`` (mutating operations so far), ``synced``, ``cut_at``, ``armed_at``."""
        return self._command("status")

    @property
    def is_cut(self) -> bool:
        return self.status()["cut_at"] is not None

    def remount(self) -> CutReport:
        """Unmount, let the power come back (the backing folder keeps what was synced before
        the cut; all of it without a cut), and mount again with nothing unsynced."""
        return CutReport.of(self._command("remount", key="ready"))

    def close(self) -> CutReport | None:
        """Unmount and stop the server (applying a cut, as :meth:`remount`). Idempotent."""
        if self._closed:
            return None
        try:
            report = CutReport.of(self._command("quit", key="bye"))
            self._proc.wait(timeout=self.timeout)
            return report
        finally:
            self._closed = True
            self._kill()

    def _kill(self) -> None:
        self._closed = True
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=self.timeout)
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        if any(point == str(self.mountpoint) for point, _ in _mounts()):
            _force_unmount(str(self.mountpoint))


@contextmanager
def powercut_mount(
    scratch: Path, *, drop: bool = True, timeout: float = 30.0
) -> Iterator[PowerCut]:
    """Mount a power-cut filesystem at ``scratch/mnt`` over ``scratch/backing`` for the
    ``with`` block; unmounted at its end whatever happens (a cut still pending is applied).
    *drop* False: a cut keeps every unsynced byte (a process crash, the control case)."""
    fs = PowerCut(scratch, drop=drop, timeout=timeout)
    try:
        yield fs
    finally:
        try:
            fs.close()
        finally:
            fs._kill()
