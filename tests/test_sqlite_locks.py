"""A reader opened inside the writer's process must not drop the writer's locks.

Closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. ``connect_reader`` once read the store's header with a Python ``open()``; run in the
writer's process (``SqliteStore.lookup``, the answer board), that released the writer's shared
lock on the store file, so another process closing its connection could take the WAL for the
last one and checkpoint and remove it under the writer: a malformed file (seen with
``broker answer`` beside a running broker). The header is now read by SQLite itself.
"""

from __future__ import annotations

import pathlib
import sys

import trio

from broker import TurnStart
from broker.store import open_sqlite_store

#: Exit 0 when the whole file can be locked exclusively (nobody holds a lock on it), else 1.
TRY_EXCLUSIVE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError:
    sys.exit(1)
fcntl.lockf(fd, fcntl.LOCK_UN)
sys.exit(0)
"""


async def lockable(path: pathlib.Path) -> bool:
    done = await trio.run_process([sys.executable, "-c", TRY_EXCLUSIVE, str(path)], check=False)
    return done.returncode == 0


async def test_a_reader_in_the_writers_process_keeps_the_writers_locks(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "log.sqlite"
    with trio.fail_after(30):
        async with open_sqlite_store(path) as store:
            await store.create_session("s", None)
            await store.append("s", [TurnStart(turn=1)])
            assert not await lockable(path)  # the writer holds its shared lock
            assert await store.lookup("s") is not None  # a reader in this process
            assert not await lockable(path)  # ... and still does
            await store.answer_board().pending()  # the answer board's reader too
            assert not await lockable(path)
        assert await lockable(path)  # closed: nothing held
