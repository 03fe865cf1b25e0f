"""Per-command process and memory bounds: a child cgroup when one can be made, else rlimits.

``Bounds.detect()`` looks once for a place to make child cgroups with the ``pids`` and
``memory`` controllers: cgroup v2 first (our own cgroup, when it already delegates them in
``cgroup.subtree_control``), then cgroup v1 hierarchies mounted per controller. Each command
then gets its own child cgroup (``pids.max``, ``memory.max`` / ``memory.limit_in_bytes``),
joined before ``exec`` by a tiny ``sh`` wrapper, killed and removed afterwards.

Where no cgroup is writable the fallback is ``prlimit``: ``RLIMIT_DATA`` for memory, and
``RLIMIT_NPROC`` for processes *only when we are not root* — the kernel never applies
``RLIMIT_NPROC`` to host uid 0, which is what the sandbox's uid maps back to when root starts
it. :meth:`Bounds.describe` says which applies; the tmpfs sizes bound ``/tmp`` and
``/dev/shm`` in every case.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import shutil
import signal

import attrs

__all__ = ["Bounds", "CommandCgroup"]

_ROOT = pathlib.Path("/sys/fs/cgroup")
_counter = itertools.count()

# Joins every cgroup.procs file given before "--", then execs the rest: the command starts
# inside its cgroups, so nothing it forks can be outside them.
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


_Mounts = list[tuple[str, pathlib.Path, set[str]]]


def _mounts() -> _Mounts:
    """(fstype, mount point, super options) of every cgroup mount we can see."""
    out: _Mounts = []
    try:
        text = pathlib.Path("/proc/self/mountinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((rfields[0], pathlib.Path(fields[4]), set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """Our cgroup path per v1 controller, and under the key ``""`` in v2."""
    out: dict[str, str] = {}
    try:
        text = pathlib.Path("/proc/self/cgroup").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


def _usable(directory: pathlib.Path, control_file: str) -> bool:
    """Whether we can make a child of *directory* that has *control_file*."""
    probe = directory / f"broker-probe-{os.getpid()}-{next(_counter)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / control_file).exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _v2_parent(mounts: _Mounts, own: dict[str, str]) -> pathlib.Path | None:
    for fstype, point, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        parent = point / own[""].lstrip("/")
        try:
            delegated = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if "pids" in delegated and "memory" in delegated and _usable(parent, "pids.max"):
            return parent
    return None


def _v1_parent(
    mounts: _Mounts, own: dict[str, str], controller: str, file: str
) -> pathlib.Path | None:
    for fstype, point, options in mounts:
        if fstype != "cgroup" or controller not in options or controller not in own:
            continue
        parent = point / own[controller].lstrip("/")
        if _usable(parent, file):
            return parent
    return None


def _contain_parent(mounts: _Mounts, own: dict[str, str]) -> tuple[pathlib.Path | None, bool]:
    """Where a controller-less cgroup can be made to hold a process tree (v2 first)."""
    for fstype, point, options in sorted(mounts, key=lambda m: m[0] != "cgroup2"):
        if fstype == "cgroup2":
            key = ""
        else:
            key = next((o for o in options if o in own), "")
            if not key:
                continue
        if key not in own:
            continue
        parent = point / own[key].lstrip("/")
        if _usable(parent, "cgroup.procs"):
            return parent, fstype == "cgroup2"
    return None, False


@attrs.define(eq=False)
class CommandCgroup:
    """The cgroup directories of one command (one in v2, one per controller in v1)."""

    directories: tuple[pathlib.Path, ...]
    v2: bool

    def join_argv(self) -> list[str]:
        """The argv prefix that joins these cgroups and then execs what follows."""
        procs = [str(d / "cgroup.procs") for d in self.directories]
        return ["/bin/sh", "-c", _JOIN, "sh", *procs, "--"]

    def kill(self) -> bool:
        """SIGKILL every process in the cgroups; True when none is left (zombies excepted)."""
        empty = True
        for directory in self.directories:
            if self.v2:
                with contextlib.suppress(OSError):
                    (directory / "cgroup.kill").write_text("1")
            try:
                pids = (directory / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                empty = False
                with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
        return empty

    def remove(self) -> bool:
        """Remove the directories; True when all are gone (a cgroup with members stays)."""
        gone = True
        for directory in self.directories:
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                gone = False
        return gone


def _write(path: pathlib.Path, value: int) -> None:
    path.write_text(str(value))


@attrs.frozen(kw_only=True)
class Bounds:
    """Where per-command bounds come from on this machine (see the module docstring)."""

    v2_parent: pathlib.Path | None = None
    pids_parent: pathlib.Path | None = None
    memory_parent: pathlib.Path | None = None
    prlimit: str | None = None
    root: bool = False
    contain_parent: pathlib.Path | None = None
    contain_v2: bool = False

    @classmethod
    def detect(cls) -> Bounds:
        """Look for writable cgroups (this makes and removes a probe child cgroup)."""
        mounts, own = _mounts(), _own_paths()
        root = os.geteuid() == 0
        contain, contain_v2 = _contain_parent(mounts, own)
        v2 = _v2_parent(mounts, own)
        if v2 is not None:
            return cls(v2_parent=v2, root=root, contain_parent=contain, contain_v2=contain_v2)
        return cls(
            pids_parent=_v1_parent(mounts, own, "pids", "pids.max"),
            memory_parent=_v1_parent(mounts, own, "memory", "memory.limit_in_bytes"),
            prlimit=shutil.which("prlimit"),
            root=root,
            contain_parent=contain,
            contain_v2=contain_v2,
        )

    def contain(self) -> CommandCgroup | None:
        """A fresh cgroup with no limits, only to hold (and later kill) a process tree.

        None when no cgroup can be made here. Raises ``OSError`` if making it fails.
        """
        if self.contain_parent is None:
            return None
        directory = self.contain_parent / f"broker-hook-{os.getpid()}-{next(_counter)}"
        directory.mkdir()
        return CommandCgroup(directories=(directory,), v2=self.contain_v2)

    @property
    def limits_processes(self) -> bool:
        """Whether a process limit applies to each command."""
        return (
            self.v2_parent is not None
            or self.pids_parent is not None
            or (self.prlimit is not None and not self.root)
        )

    def describe(self) -> str:
        """Which mechanism bounds processes and memory, in one line."""
        if self.v2_parent is not None:
            return f"cgroup v2 under {self.v2_parent}: pids.max and memory.max"
        parts = []
        if self.pids_parent is not None:
            parts.append(f"cgroup v1 pids.max under {self.pids_parent}")
        elif self.prlimit is not None and not self.root:
            parts.append("prlimit RLIMIT_NPROC (counts every process of this user)")
        else:
            parts.append(
                "no process limit (no writable pids cgroup, and RLIMIT_NPROC does not bind root)"
            )
        if self.memory_parent is not None:
            parts.append(f"cgroup v1 memory.limit_in_bytes under {self.memory_parent}")
        elif self.prlimit is not None:
            parts.append("prlimit RLIMIT_DATA (heap and private mappings; not page cache)")
        else:
            parts.append("no memory limit (no writable memory cgroup and no prlimit)")
        return "; ".join(parts) + "; tmpfs size= on /tmp and /dev/shm"

    def create(self, *, max_processes: int, memory_limit: int) -> CommandCgroup | None:
        """Make one command's cgroup with its limits; None when no cgroup applies.

        Raises ``OSError`` when the cgroup cannot be made or limited (fail closed: the caller
        must not run the command unbounded by surprise).
        """
        name = f"broker-cmd-{os.getpid()}-{next(_counter)}"
        if self.v2_parent is not None:
            directory = self.v2_parent / name
            directory.mkdir()
            group = CommandCgroup(directories=(directory,), v2=True)
            try:
                _write(directory / "pids.max", max_processes)
                _write(directory / "memory.max", memory_limit)
                with contextlib.suppress(OSError):
                    _write(directory / "memory.swap.max", 0)
            except BaseException:
                group.remove()
                raise
            return group
        made: list[pathlib.Path] = []
        try:
            if self.pids_parent is not None:
                made.append(self.pids_parent / name)
                made[-1].mkdir()
                _write(made[-1] / "pids.max", max_processes)
            if self.memory_parent is not None:
                made.append(self.memory_parent / name)
                made[-1].mkdir()
                _write(made[-1] / "memory.limit_in_bytes", memory_limit)
                # Swap counts too where swap accounting exists (memsw >= limit, set after).
                with contextlib.suppress(OSError):
                    _write(made[-1] / "memory.memsw.limit_in_bytes", memory_limit)
        except BaseException:
            CommandCgroup(directories=tuple(made), v2=False).remove()
            raise
        return CommandCgroup(directories=tuple(made), v2=False) if made else None

    def rlimit_argv(self, *, max_processes: int, memory_limit: int) -> list[str]:
        """The ``prlimit`` prefix for what no cgroup bounds (empty when nothing applies)."""
        if self.prlimit is None:
            return []
        args = []
        if self.pids_parent is None and self.v2_parent is None and not self.root:
            args.append(f"--nproc={max_processes}")
        if self.memory_parent is None and self.v2_parent is None:
            args.append(f"--data={memory_limit}")
        return [self.prlimit, *args, "--"] if args else []
