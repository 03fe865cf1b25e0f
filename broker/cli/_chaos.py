"""``broker chaos``: seeded faults against a live broker; exits non-zero on any violation."""

from __future__ import annotations

import argparse
import json
import logging
import textwrap
import time
from typing import TYPE_CHECKING

import attrs

from ..chaos import REAL_QUIET, REAL_TIME_SCALE, ChaosConfig, run_chaos
from ..store import StoreUrlError, parse_store_url
from ._errors import CliError
from ._numbers import fraction, integer, positive_integer

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]


DESCRIPTION = "\n\n".join(
    textwrap.fill(paragraph, width=79)
    for paragraph in (
        "Answerers that raise, return garbage, hang or are torn down mid-ask; aborts and "
        "caller cancellations at random points; injected store failures on either audit "
        "append; policy switches and grants racing the asks. Then every invariant is checked "
        "from the logs. Exit status 1 on any violation, 2 on a bad argument or a store that "
        "cannot be opened.",
        "By default the broker runs in memory on a virtual clock (fast, and the timing of "
        "every fault reproducible from the seed). With --store it writes to that durable store "
        "on the real clock, so the schedule is compressed to keep runs short: every planned "
        f"delay is multiplied by {REAL_TIME_SCALE:g} (2000 asks start within 4 s) and the asks "
        f"get {REAL_QUIET:g} s to finish before the teardown settles the rest. Each run writes "
        "new sessions (runs sharing a database never meet), whose stored rows are then "
        "verified as broker log verify --allow-pending does.",
    )
)


def register(sub: _Sub) -> None:
    """Add the ``chaos`` sub-command."""
    parser = sub.add_parser(
        "chaos",
        help="run seeded faults against a live broker and check its invariants",
        description=DESCRIPTION,
        epilog="examples:\n"
        "  broker chaos                                 one seed, 2000 asks, 32 sessions\n"
        "  broker chaos --seed 1 --seeds 20 --asks 5000 --sessions 64   the long run\n"
        "  broker chaos --seed 7 --json                 one JSON object per seed\n"
        "  broker chaos --store logs/chaos.sqlite --asks 500           on a SQLite file\n"
        "  broker chaos --store postgresql://broker@db/agents --asks 500   on PostgreSQL",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=integer, default=1, help="the first seed (default 1)")
    parser.add_argument(
        "--asks", type=positive_integer, default=2000, help="questions per seed (default 2000)"
    )
    parser.add_argument(
        "--sessions", type=positive_integer, default=32, help="sessions per seed (default 32)"
    )
    parser.add_argument(
        "--fault-rate",
        type=fraction,
        default=0.15,
        help="probability of each independent fault, 0 to 1 (default 0.15)",
    )
    parser.add_argument(
        "--seeds", type=positive_integer, default=1, help="run this many seeds from --seed"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object per seed")
    parser.add_argument(
        "--store",
        type=_STORE,
        metavar="STORE",
        help="run against this durable store on the real clock: a file path, sqlite:///PATH "
        "or postgresql://USER@HOST/DB (default: in memory, virtual clock)",
    )
    parser.set_defaults(func=run)


def _STORE(text: str) -> str:
    """A store as given: a path, ``sqlite:///PATH`` or ``postgresql://…`` (checked here; the
    message never repeats a URL, which may carry a password)."""
    try:
        parse_store_url(text, parameter="--store")
    except StoreUrlError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--store ")) from exc
    return text


def run(args: argparse.Namespace) -> int:
    """Run the seeds; returns 1 if any run violated an invariant."""
    # Answerer failures are the point of the exercise: keep their warnings off the terminal.
    logging.getLogger("broker").setLevel(logging.CRITICAL)
    status = 0
    for seed in range(args.seed, args.seed + args.seeds):
        try:
            config = ChaosConfig(
                seed=seed, asks=args.asks, sessions=args.sessions, fault_rate=args.fault_rate
            )
        except ValueError as exc:
            raise CliError(str(exc)) from exc
        started = time.perf_counter()
        report = run_chaos(config, store=args.store)
        elapsed = time.perf_counter() - started
        if args.json:
            data = attrs.asdict(report, recurse=False)
            data["config"] = attrs.asdict(config)
            data["elapsed_s"] = round(elapsed, 3)
            data["abort_lags"] = list(report.abort_lags)
            if report.store is None:  # in memory: the output as before --store existed
                del data["store"], data["verified"]
            print(json.dumps(data, default=list))
        else:
            print("\n".join(report.lines()) + f"\n(wall time {elapsed:.2f}s)\n")
        if not report.ok:
            status = 1
    return status
