"""The power-cut filesystem's server process: mounts it and obeys its controller.

    python -m tests.powercut._server BACKING ATTIC MOUNTPOINT [--keep-unsynced]

Runs the pyfuse3 session on trio (one request at a time: a cut falls between two operations)
beside a control loop reading one command per line on stdin and answering one JSON object per
line on stdout:

* ``arm N``: cut the power at the N-th mutating operation from now;
* ``cut``: cut the power now (nothing if it already is);
* ``status``: the operation counts, where the cut fell;
* ``remount``: unmount, apply the power loss to the backing folder, mount again;
* ``quit`` (or end of input): unmount, apply the power loss, exit.

It answers ``{"ready": ...}`` once mounted, and after each ``remount``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import pyfuse3
import trio

from ._fs import PowerCutOperations

_OPTIONS = frozenset({"fsname=powercut", "subtype=powercut"})


class _Server:
    def __init__(self, backing: str, attic: str, mountpoint: str, drop: bool) -> None:
        self.backing = backing
        self.attic = attic
        self.mountpoint = mountpoint
        self.drop = drop
        self.ops = PowerCutOperations(backing, attic, drop=drop)
        self.scope: trio.CancelScope | None = None
        self.stopped = trio.Event()

    async def _run_fuse(self, scope: trio.CancelScope, stopped: trio.Event) -> None:
        try:
            with scope:
                await pyfuse3.main(min_tasks=1, max_tasks=1)
        finally:
            stopped.set()

    def mount(self, nursery: trio.Nursery) -> None:
        pyfuse3.init(self.ops, self.mountpoint, set(_OPTIONS))
        self.scope, self.stopped = trio.CancelScope(), trio.Event()
        nursery.start_soon(self._run_fuse, self.scope, self.stopped)

    async def unmount(self) -> dict[str, Any]:
        """Unmount (lazily: a dead process's files may still be open) and let the power
        come back: the backing folder as the cut left it."""
        assert self.scope is not None
        self.scope.cancel()
        await self.stopped.wait()
        pyfuse3.close(unmount=True)
        self.ops.close_all()
        loss = self.ops.power_loss()
        return {"loss": loss.to_json(), **self.status()}

    def status(self) -> dict[str, Any]:
        return {
            "ops": self.ops.ops,
            "synced": self.ops.synced,
            "cut_at": self.ops.cut_at,
            "armed_at": self.ops.armed_at,
        }


async def _serve(args: argparse.Namespace) -> None:
    server = _Server(args.backing, args.attic, args.mountpoint, drop=not args.keep_unsynced)
    commands = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    replies = trio.lowlevel.FdStream(os.dup(sys.stdout.fileno()))

    async def reply(**fields: Any) -> None:
        await replies.send_all(json.dumps(fields).encode() + b"\n")

    async with trio.open_nursery() as nursery:
        server.mount(nursery)
        await reply(ready=True)
        pending = b""
        while True:
            await trio.lowlevel.checkpoint()
            while b"\n" not in pending:
                chunk = await commands.receive_some()
                if not chunk:
                    pending += b"\nquit\n"
                    break
                pending += chunk
            line, _, pending = pending.partition(b"\n")
            word, _, rest = line.decode().strip().partition(" ")
            if word == "arm":
                server.ops.arm(int(rest))
                await reply(ok=True, **server.status())
            elif word == "cut":
                server.ops.cut()
                await reply(ok=True, **server.status())
            elif word == "status":
                await reply(ok=True, **server.status())
            elif word == "remount":
                report = await server.unmount()
                server.ops = PowerCutOperations(server.backing, server.attic, drop=server.drop)
                server.mount(nursery)
                await reply(ready=True, **report)
            elif word == "quit":
                report = await server.unmount()
                await reply(bye=True, **report)
                break
            elif word:
                await reply(error=f"unknown command {word!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backing")
    parser.add_argument("attic")
    parser.add_argument("mountpoint")
    parser.add_argument("--keep-unsynced", action="store_true")
    trio.run(_serve, parser.parse_args())


if __name__ == "__main__":
    main()
