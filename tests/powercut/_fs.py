"""The power-cut filesystem: pyfuse3 operations over a backing folder, and the power loss.

Every operation passes through to the backing folder at once (the mount shows what a running
machine's page cache would show), and the operations remember what a power cut would undo:

* **file contents**: per file, an undo log of every write and truncate since that file's last
  ``fsync``/``fdatasync`` (the bytes a write overwrote and the size before it); a sync clears
  it. At a cut the log is replayed backwards: the file holds exactly its bytes as of its last
  sync (a file never synced: empty).
* **directory entries**: per directory, its entries (name -> node) as of its last ``fsync``
  of the directory itself; creates, unlinks, renames, mkdirs and rmdirs change the live
  entries only. At a cut the namespace is rebuilt from the root's durable entries down:
  a file created since is gone, a file unlinked since is back (with its synced bytes), a rename
  is undone. A file's own ``fsync`` makes its bytes durable, never its name.

Nothing else is remembered: modes, owners and times pass through and stay. Hard links,
symbolic links, device nodes and extended attributes are refused. See design/powercut.md.

A cut (``cut()``, or an armed one: the N-th mutating operation from the arming) freezes the
filesystem: every later mutating operation (write, truncate, sync, create, rename, ...) fails
with EIO, as a dead disk would; reads still answer (a dying process that faults in an mmap
page must not get SIGBUS). The backing folder is rewritten to the durable state only when the
filesystem is unmounted (:meth:`PowerCutOperations.power_loss`): the power comes back.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyfuse3

# Seconds the kernel may cache names and attributes: every change passes through the kernel,
# so its cache stays exact within one mount (a cut is applied only after the unmount).
_TIMEOUT = 1.0


@dataclass
class _Undo:
    """What one write or truncate overwrote: put *old* back at *offset*, then cut the file to
    *old_size*. Replayed newest first, the records give back the file as of its last sync."""

    offset: int
    old: bytes
    old_size: int
    written: int  # bytes this operation wrote (what a cut drops), for the report


@dataclass(eq=False)
class Node:
    """A file or directory of the mount (one name at a time: no hard links)."""

    ino: int
    is_dir: bool
    parent: Node | None  # None: the root, or unlinked (its bytes wait in the attic)
    name: bytes
    entries: dict[bytes, Node] = field(default_factory=dict)  # a directory's live entries
    durable: dict[bytes, Node] = field(default_factory=dict)  # ... as of its last fsync
    undo: list[_Undo] = field(default_factory=list)  # a file's writes since its last fsync


@dataclass
class LossReport:
    """What a power loss threw away."""

    files_rolled_back: int = 0  # files that had unsynced writes or truncates
    bytes_dropped: int = 0  # bytes written and never synced
    entries_dropped: int = 0  # names whose file changed (created, removed, renamed), unsynced

    def to_json(self) -> dict[str, int]:
        return {
            "files_rolled_back": self.files_rolled_back,
            "bytes_dropped": self.bytes_dropped,
            "entries_dropped": self.entries_dropped,
        }


class PowerCutOperations(pyfuse3.Operations):
    """The filesystem's operations (one mount). *backing*: the folder the mount shows;
    *attic*: a folder on the same filesystem where unlinked files wait (emptied at unmount).
    *drop*: False keeps every unsynced byte at a cut (a process crash, not a power loss: the
    control case that proves the dropping is what a test sees)."""

    def __init__(self, backing: str, attic: str, *, drop: bool = True) -> None:
        super().__init__()
        self.backing = os.fsencode(backing)
        self.attic = os.fsencode(attic)
        self.drop = drop
        self.ops = 0  # mutating operations so far (arming counts these)
        self.synced = 0  # fsync/fdatasync/fsync of a directory that succeeded
        self.armed_at: int | None = None
        self.cut_at: int | None = None  # the operation count at the cut, once cut
        self._next_ino = pyfuse3.ROOT_INODE + 1
        self._next_fh = 1
        self._files: dict[int, tuple[Node, int]] = {}  # fh -> (node, backing fd)
        self._dirs: dict[int, Node] = {}  # directory fh -> node
        self.root = Node(ino=pyfuse3.ROOT_INODE, is_dir=True, parent=None, name=b"")
        self.nodes: dict[int, Node] = {self.root.ino: self.root}
        if os.path.isdir(self.attic):
            shutil.rmtree(self.attic)
        os.makedirs(self.attic)
        self._scan(self.root)

    # -- the model -----------------------------------------------------------------------

    def _scan(self, directory: Node) -> None:
        """What is on disk at mount time is durable, as after a clean shutdown."""
        with os.scandir(self.path(directory)) as listing:
            for entry in listing:
                node = self._new(directory, entry.name, entry.is_dir(follow_symlinks=False))
                if entry.is_symlink() or not (node.is_dir or entry.is_file()):
                    raise OSError(errno.ENOTSUP, f"not a file or folder: {entry.path!r}")
                if node.is_dir:
                    self._scan(node)
        directory.durable = dict(directory.entries)

    def _new(self, parent: Node, name: bytes, is_dir: bool) -> Node:
        node = Node(ino=self._next_ino, is_dir=is_dir, parent=parent, name=name)
        self._next_ino += 1
        self.nodes[node.ino] = node
        parent.entries[name] = node
        return node

    def path(self, node: Node) -> bytes:
        """Where *node*'s bytes are in the backing folder (or the attic, once unlinked)."""
        if node is self.root:
            return self.backing
        if node.parent is None:
            return os.path.join(self.attic, str(node.ino).encode())
        return os.path.join(self.path(node.parent), node.name)

    def _tick(self) -> None:
        """Count one mutating operation; fail it (and all after) once the power is cut."""
        if self.cut_at is not None:
            raise pyfuse3.FUSEError(errno.EIO)
        self.ops += 1
        if self.armed_at is not None and self.ops >= self.armed_at:
            self.cut()
            raise pyfuse3.FUSEError(errno.EIO)

    def arm(self, ops: int) -> None:
        """Cut the power at the *ops*-th mutating operation from now (it fails, EIO)."""
        if ops < 1:
            raise ValueError(f"arm: ops must be at least 1, got {ops}")
        self.armed_at = self.ops + ops

    def cut(self) -> None:
        """The power is cut now: every later mutating operation fails (EIO)."""
        if self.cut_at is None:
            self.cut_at = self.ops
            self.armed_at = None

    def _unlink_node(self, node: Node) -> None:
        """Take *node* out of the live namespace; its bytes wait in the attic (a durable
        entry may still name it, and open handles still read it)."""
        assert node.parent is not None
        source = self.path(node)
        del node.parent.entries[node.name]
        node.parent = None
        os.rename(source, self.path(node))

    def _record(self, node: Node, fd: int, offset: int, length: int, written: int) -> None:
        """Before bytes [offset, offset+length) of *node* change: remember them."""
        size = os.fstat(fd).st_size
        old = os.pread(fd, max(0, min(length, size - offset)), offset) if offset < size else b""
        node.undo.append(_Undo(offset=offset, old=old, old_size=size, written=written))

    def power_loss(self) -> LossReport:
        """Rewrite the backing folder to what survives the cut (call after the unmount, with
        every handle closed). Without a cut, or with ``drop=False``: a clean shutdown, the
        live state stays."""
        report = LossReport()
        if self.cut_at is not None and self.drop:
            for node in list(self.nodes.values()):
                if not node.is_dir and node.undo:
                    report.files_rolled_back += 1
                    report.bytes_dropped += sum(u.written for u in node.undo)
                    self._roll_back(node)
            report.entries_dropped = self._entries_changed()
            self._rebuild_namespace()
        shutil.rmtree(self.attic, ignore_errors=True)
        return report

    def _roll_back(self, node: Node) -> None:
        fd = os.open(self.path(node), os.O_WRONLY)
        try:
            for undo in reversed(node.undo):
                os.pwrite(fd, undo.old, undo.offset)
                os.ftruncate(fd, undo.old_size)
        finally:
            os.close(fd)
        node.undo.clear()

    def _entries_changed(self) -> int:
        changed = 0
        for node in self.nodes.values():
            if node.is_dir:
                live, durable = node.entries, node.durable
                changed += sum(
                    1 for n in live.keys() | durable if live.get(n) is not durable.get(n)
                )
        return changed

    def _walk_live(self, directory: Node) -> Iterator[Node]:
        for child in directory.entries.values():
            yield child
            if child.is_dir:
                yield from self._walk_live(child)

    def _rebuild_namespace(self) -> None:
        """Every live file to the attic, the live folders away, then the durable tree from the
        root's durable entries down, each file taken back from the attic."""
        live = list(self._walk_live(self.root))
        modes: dict[int, int] = {}
        for node in live:
            if node.is_dir:
                modes[node.ino] = stat.S_IMODE(os.stat(self.path(node)).st_mode)
        for node in live:
            if not node.is_dir:
                os.rename(self.path(node), os.path.join(self.attic, str(node.ino).encode()))
        for node in reversed(live):  # children before their folder
            if node.is_dir:
                os.rmdir(self.path(node))
        placed: dict[int, bytes] = {}
        seen_dirs: set[int] = {self.root.ino}

        def build(directory: Node, where: bytes) -> None:
            for name, child in directory.durable.items():
                target = os.path.join(where, name)
                if child.is_dir:
                    if child.ino in seen_dirs:  # one folder durable under two names: once
                        continue
                    seen_dirs.add(child.ino)
                    os.mkdir(target, modes.get(child.ino, 0o755))
                    build(child, target)
                elif child.ino in placed:  # one file durable under two names: a copy
                    shutil.copyfile(placed[child.ino], target)
                else:
                    os.rename(os.path.join(self.attic, str(child.ino).encode()), target)
                    placed[child.ino] = target

        build(self.root, self.backing)

    # -- attributes and names ------------------------------------------------------------

    def _node(self, ino: int) -> Node:
        try:
            return self.nodes[ino]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    def _attrs(self, node: Node, fd: int | None = None) -> pyfuse3.EntryAttributes:
        st = os.fstat(fd) if fd is not None else os.lstat(self.path(node))
        attrs = pyfuse3.EntryAttributes()
        attrs.st_ino = node.ino
        attrs.generation = 0
        attrs.entry_timeout = _TIMEOUT
        attrs.attr_timeout = _TIMEOUT
        attrs.st_mode = st.st_mode
        attrs.st_nlink = st.st_nlink
        attrs.st_uid = st.st_uid
        attrs.st_gid = st.st_gid
        attrs.st_rdev = st.st_rdev
        attrs.st_size = st.st_size
        attrs.st_blksize = st.st_blksize
        attrs.st_blocks = st.st_blocks
        attrs.st_atime_ns = st.st_atime_ns
        attrs.st_mtime_ns = st.st_mtime_ns
        attrs.st_ctime_ns = st.st_ctime_ns
        return attrs

    def _child(self, parent_inode: int, name: bytes) -> Node:
        parent = self._node(parent_inode)
        if not parent.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        try:
            return parent.entries[name]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        if name == b".":
            return self._attrs(self._node(parent_inode))
        if name == b"..":
            parent = self._node(parent_inode).parent
            return self._attrs(parent or self.root)
        return self._attrs(self._child(parent_inode, name))

    async def forget(self, inode_list: object) -> None:
        pass  # nodes live as long as the mount (a handful of files)

    async def getattr(
        self, inode: int, ctx: pyfuse3.RequestContext | None = None
    ) -> pyfuse3.EntryAttributes:
        return self._attrs(self._node(inode))

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        self._tick()
        node = self._node(inode)
        where = self.path(node)
        try:
            if fields.update_size:
                fd = self._files[fh][1] if fh is not None else os.open(where, os.O_RDWR)
                try:
                    self._truncate(node, fd, attr.st_size)
                finally:
                    if fh is None:
                        os.close(fd)
            if fields.update_mode:
                os.chmod(where, stat.S_IMODE(attr.st_mode))
            if fields.update_uid or fields.update_gid:
                os.chown(
                    where,
                    attr.st_uid if fields.update_uid else -1,
                    attr.st_gid if fields.update_gid else -1,
                )
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(where)
                os.utime(
                    where,
                    ns=(
                        attr.st_atime_ns if fields.update_atime else st.st_atime_ns,
                        attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns,
                    ),
                )
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        return self._attrs(node)

    def _truncate(self, node: Node, fd: int, size: int) -> None:
        current = os.fstat(fd).st_size
        if size == current:
            return
        # A shrink drops the tail (remembered); a growth adds zeroes (undone by the size).
        self._record(node, fd, size, max(0, current - size), written=max(0, size - current))
        os.ftruncate(fd, size)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.backing)
        data = pyfuse3.StatvfsData()
        for attr in (
            "f_bsize",
            "f_frsize",
            "f_blocks",
            "f_bfree",
            "f_bavail",
            "f_files",
            "f_ffree",
            "f_favail",
            "f_namemax",
        ):
            setattr(data, attr, getattr(st, attr))
        return data

    # -- the namespace -------------------------------------------------------------------

    async def create(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        self._tick()
        parent = self._node(parent_inode)
        if name in parent.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        target = os.path.join(self.path(parent), name)
        try:
            fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL, stat.S_IMODE(mode))
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        node = self._new(parent, name, is_dir=False)
        return self._open_handle(node, fd), self._attrs(node, fd)

    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._tick()
        parent = self._node(parent_inode)
        if name in parent.entries:
            raise pyfuse3.FUSEError(errno.EEXIST)
        os.mkdir(os.path.join(self.path(parent), name), stat.S_IMODE(mode))
        return self._attrs(self._new(parent, name, is_dir=True))

    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._tick()
        node = self._child(parent_inode, name)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        self._unlink_node(node)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._tick()
        node = self._child(parent_inode, name)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        if node.entries:
            raise pyfuse3.FUSEError(errno.ENOTEMPTY)
        self._unlink_node(node)

    async def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: pyfuse3.RequestContext,
    ) -> None:
        self._tick()
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)
        node = self._child(parent_inode_old, name_old)
        new_parent = self._node(parent_inode_new)
        replaced = new_parent.entries.get(name_new)
        if replaced is node:
            return
        if replaced is not None:
            if flags & pyfuse3.RENAME_NOREPLACE:
                raise pyfuse3.FUSEError(errno.EEXIST)
            if replaced.is_dir != node.is_dir:
                raise pyfuse3.FUSEError(errno.EISDIR if replaced.is_dir else errno.ENOTDIR)
            if replaced.is_dir and replaced.entries:
                raise pyfuse3.FUSEError(errno.ENOTEMPTY)
            self._unlink_node(replaced)
        ancestor: Node | None = new_parent
        while ancestor is not None:  # a folder into itself
            if ancestor is node:
                raise pyfuse3.FUSEError(errno.EINVAL)
            ancestor = ancestor.parent
        source = self.path(node)
        assert node.parent is not None
        del node.parent.entries[node.name]
        node.parent, node.name = new_parent, name_new
        new_parent.entries[name_new] = node
        os.rename(source, self.path(node))

    async def link(
        self, inode: int, new_parent_inode: int, new_name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)  # hard links are not modelled

    async def symlink(
        self,
        parent_inode: int,
        name: bytes,
        target: bytes,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    async def mknod(
        self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        raise pyfuse3.FUSEError(errno.EPERM)

    # -- directories ---------------------------------------------------------------------

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self._node(inode)
        if not node.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        fh = self._next_fh
        self._next_fh += 1
        self._dirs[fh] = node
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        node = self._dirs[fh]
        names = sorted(node.entries)
        for index in range(start_id, len(names)):
            child = node.entries[names[index]]
            if not pyfuse3.readdir_reply(token, names[index], self._attrs(child), index + 1):
                break

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        self._tick()
        node = self._dirs[fh]
        node.durable = dict(node.entries)
        self.synced += 1

    # -- files ---------------------------------------------------------------------------

    def _open_handle(self, node: Node, fd: int) -> pyfuse3.FileInfo:
        fh = self._next_fh
        self._next_fh += 1
        self._files[fh] = (node, fd)
        return pyfuse3.FileInfo(fh=fh)  # keep_cache False: the page cache is dropped on open

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        node = self._node(inode)
        if node.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if flags & os.O_TRUNC:
            self._tick()
        try:
            fd = os.open(self.path(node), os.O_RDWR)
        except OSError as exc:
            raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
        if flags & os.O_TRUNC:
            self._truncate(node, fd, 0)
        return self._open_handle(node, fd)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        return os.pread(self._files[fh][1], size, off)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self._tick()
        node, fd = self._files[fh]
        self._record(node, fd, off, len(buf), written=len(buf))
        return os.pwrite(fd, buf, off)

    async def flush(self, fh: int) -> None:
        pass  # close() makes nothing durable

    async def fsync(self, fh: int, datasync: bool) -> None:
        self._tick()
        node, _fd = self._files[fh]
        node.undo.clear()  # the model's disk now holds these bytes (the backing is not synced)
        self.synced += 1

    async def release(self, fh: int) -> None:
        entry = self._files.pop(fh, None)
        if entry is not None:
            os.close(entry[1])

    def close_all(self) -> None:
        """Close every backing descriptor (at unmount: the kernel released nothing more)."""
        for _node, fd in self._files.values():
            os.close(fd)
        self._files.clear()
        self._dirs.clear()
