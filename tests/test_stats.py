"""``broker stats`` and :mod:`broker.stats` on a store with known contents.

The store is written through the real library (``open_broker`` over a SQLite store, a rules
file, grants, an answerer) with the store's row clock in the test's hand: the answerer moves
it forward by a planned delay before it answers, so every answer time is exact. (Not trio's
``autojump_clock``: it would jump while the store's worker thread writes.) One session lies
30 days back, one 2 hours back, so ``--since 7d`` keeps only the second.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import ClassVar

import attrs
import pytest
import trio

from broker import (
    Answer,
    AnswerNext,
    ApprovalAsked,
    ApprovalDecided,
    ApprovalRequest,
    EventStore,
    Outcome,
    Session,
    Source,
    open_broker,
)
from broker.cli import main
from broker.rules import Layer, load_rules
from broker.stats import (
    AnswerTimes,
    GrantCount,
    HistogramBin,
    LoggedEvent,
    Stats,
    collect,
    percentile,
    read_stats,
    render_html,
    stats_page,
    write_page,
)
from broker.store import open_postgres_store, open_sqlite_store

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
NOW_MS = time.time_ns() // 1_000_000
#: An hour into the day 30 days back, and the start of the hour 2 hours back: each session's
#: events (a minute at most) stay inside one hour and one day.
OLD_MS = (NOW_MS - 30 * DAY_MS) // DAY_MS * DAY_MS + HOUR_MS
RECENT_MS = NOW_MS // HOUR_MS * HOUR_MS - 2 * HOUR_MS
HOSTILE = "<script>alert(1)</script>"

RULES = """\
[[rules]]
decision = "allow"
tool = "bash"
command = "git status"

[[rules]]
decision = "deny"
tool = "bash"
command = "rm"
"""


@attrs.define
class Clock:
    """The store's row clock (ms since the epoch), moved by hand."""

    ms: int

    def __call__(self) -> int:
        return self.ms


@attrs.define
class Desk:
    """An answerer (logged as ``desk``): for each call id, the store's clock moves by the
    planned delay, then the planned answer (None: it delegates, to nobody)."""

    clock: Clock
    plan: dict[str, tuple[int, Answer | None]]
    answerer_name: ClassVar[str] = "desk"

    async def __call__(self, req: ApprovalRequest, next: AnswerNext) -> Outcome | Answer:
        assert req.call_id is not None
        delay, answer = self.plan[req.call_id]
        self.clock.ms += delay
        if answer is None:
            return await next()
        return answer


PLAN: dict[str, tuple[int, Answer | None]] = {
    "c2": (4_000, Answer(outcome=Outcome.ALLOWED_ONCE, by="alice")),
    "c3": (10_000, Answer(outcome=Outcome.REJECTED, by="bob")),
    "c6": (1_000, Answer(outcome=Outcome.ALLOWED_ONCE, by="alice")),
    "c7": (30_000, None),
    "c8": (2_000, Answer(outcome=Outcome.ALLOWED_ONCE, by="alice")),
    "c9": (8_000, Answer(outcome=Outcome.REJECTED, by="bob")),
}

OpenStore = Callable[[Clock], AbstractAsyncContextManager[EventStore]]


async def write_log(open_store: OpenStore, rules_file: Path) -> None:
    """The known contents: 9 questions, 2 grants (one revoked, one expired), 2 sessions."""
    clock = Clock(OLD_MS)
    desk = Desk(clock, PLAN)
    rules = load_rules(rules_file, Layer.PROJECT)
    with trio.fail_after(30):
        async with open_store(clock) as store, open_broker(store=store, rules=rules) as broker:

            async def ask(session: Session, tool: str, call_id: str, command: str = "") -> None:
                arguments = {"command": command} if command else None
                await broker.request(
                    ApprovalRequest(
                        agent=session.agent, tool_name=tool, call_id=call_id, arguments=arguments
                    )
                )

            async with broker.answerer(desk):
                async with broker.open_session() as old:
                    async with old.turn():
                        await ask(old, "bash", "c1", "git status")  # rule allows
                        await ask(old, "write_file", "c2")  # alice allows after 4 s
                        await ask(old, "edit", "c3")  # bob rejects after 10 s
                        await ask(old, "bash", "c4", "rm -rf build")  # rule denies
                        grant = await broker.remember(old, "bash", command="npm run", by="alice")
                        await ask(old, "bash", "c5", "npm run build")  # the grant allows
                        await broker.revoke(old, grant.id, by="carol")
                        await ask(old, "bash", "c6", "npm run test")  # alice, 1 s
                        await broker.remember(old, "bash", command="make", expires_in=0.05)
                        await trio.sleep(0.2)  # the grant's end passes (trio's real clock)
                        await ask(old, "bash", "c7", "make all")  # expired; nobody: unavailable
                clock.ms = RECENT_MS
                async with broker.open_session() as recent:
                    async with recent.turn():
                        await ask(recent, HOSTILE, "c8")  # alice, 2 s
                        await ask(recent, "bash", "c9", "ls")  # bob rejects after 8 s


def sqlite_at(path: Path) -> OpenStore:
    def open_store(clock: Clock) -> AbstractAsyncContextManager[EventStore]:
        return open_sqlite_store(path, clock_ms=clock)

    return open_store


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rules.toml"
    path.write_text(RULES)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, rules_file: Path) -> Path:
    path = tmp_path_factory.mktemp("stats") / "store.sqlite"
    trio.run(write_log, sqlite_at(path), rules_file)
    return path


def times(key: str, *values: int) -> AnswerTimes:
    ordered = sorted(values)
    return AnswerTimes(
        key=key,
        count=len(values),
        p50_ms=percentile(ordered, 50),
        p90_ms=percentile(ordered, 90),
        p99_ms=percentile(ordered, 99),
        max_ms=ordered[-1],
    )


def check_everything(stats: Stats) -> None:
    """The whole log's stats, exactly."""
    assert (stats.since_ms, stats.sessions, stats.asked, stats.decided, stats.pending) == (
        None,
        2,
        9,
        9,
        0,
    )
    assert stats.by_outcome == (
        (Outcome.ALLOWED_ONCE, 5),
        (Outcome.REJECTED, 3),
        (Outcome.CANCELLED, 0),
        (Outcome.UNAVAILABLE, 1),
    )
    assert [(row.source, row.total, row.outcomes) for row in stats.by_source] == [
        ("answerer", 5, ((Outcome.ALLOWED_ONCE, 3), (Outcome.REJECTED, 2), *NONE_ELSE)),
        ("rule", 2, ((Outcome.ALLOWED_ONCE, 1), (Outcome.REJECTED, 1), *NONE_ELSE)),
        ("grant", 1, ((Outcome.ALLOWED_ONCE, 1), (Outcome.REJECTED, 0), *NONE_ELSE)),
        (
            "no-answerer",
            1,
            (
                (Outcome.ALLOWED_ONCE, 0),
                (Outcome.REJECTED, 0),
                (Outcome.CANCELLED, 0),
                (Outcome.UNAVAILABLE, 1),
            ),
        ),
    ]
    assert stats.by_tool == (("bash", 6), (HOSTILE, 1), ("edit", 1), ("write_file", 1))
    # desk: 1, 2, 4, 8, 10 s -> nearest rank: p50 the 3rd (4 s), p90 and p99 the 5th (10 s).
    assert stats.by_answerer == (
        AnswerTimes(key="desk", count=5, p50_ms=4_000, p90_ms=10_000, p99_ms=10_000, max_ms=10_000),
        AnswerTimes(key="rule", count=2, p50_ms=0, p90_ms=0, p99_ms=0, max_ms=0),
        AnswerTimes(key="grant", count=1, p50_ms=0, p90_ms=0, p99_ms=0, max_ms=0),
        AnswerTimes(
            key="no-answerer", count=1, p50_ms=30_000, p90_ms=30_000, p99_ms=30_000, max_ms=30_000
        ),
    )
    assert stats.by_person == (
        AnswerTimes(key="alice", count=3, p50_ms=2_000, p90_ms=4_000, p99_ms=4_000, max_ms=4_000),
        AnswerTimes(key="bob", count=2, p50_ms=8_000, p90_ms=10_000, p99_ms=10_000, max_ms=10_000),
    )
    assert (stats.grants_given, stats.grants_revoked, stats.grants_expired) == (2, 1, 1)
    assert stats.grants_by_tool == (GrantCount(tool_name="bash", given=2, revoked=1, expired=1),)
    assert [(b.low_ms, b.count) for b in stats.histogram if b.count] == [(1_000, 3), (5_000, 2)]
    assert sum(b.count for b in stats.histogram) == 5  # answerers' decisions only
    # 30 days of decisions: one bar a day, the old session's 7 on the first, the recent 2 last.
    assert stats.bucket_ms == DAY_MS
    assert stats.over_time[0].start_ms == OLD_MS - HOUR_MS
    assert stats.over_time[-1].start_ms == RECENT_MS // DAY_MS * DAY_MS
    assert [b.total for b in stats.over_time] == [7] + [0] * (len(stats.over_time) - 2) + [2]
    assert dict(stats.over_time[0].outcomes) == {
        Outcome.ALLOWED_ONCE: 4,
        Outcome.REJECTED: 2,
        Outcome.CANCELLED: 0,
        Outcome.UNAVAILABLE: 1,
    }
    assert stats.first_ms == OLD_MS
    assert stats.last_ms == RECENT_MS + 10_000


NONE_ELSE = ((Outcome.CANCELLED, 0), (Outcome.UNAVAILABLE, 0))


def test_the_library_counts_the_log_exactly(store: Path) -> None:
    stats = read_stats(store)
    check_everything(stats)
    assert stats.store == f"store file '{store}'"


def test_since_leaves_out_what_was_stored_before(store: Path) -> None:
    stats = read_stats(store, since_ms=RECENT_MS - 1)
    assert (stats.sessions, stats.asked, stats.decided) == (1, 2, 2)
    assert stats.by_tool == ((HOSTILE, 1), ("bash", 1))
    assert stats.by_outcome[:2] == ((Outcome.ALLOWED_ONCE, 1), (Outcome.REJECTED, 1))
    assert stats.by_answerer == (times("desk", 2_000, 8_000),)
    assert stats.by_person == (times("alice", 2_000), times("bob", 8_000))
    assert (stats.grants_given, stats.grants_revoked, stats.grants_expired) == (0, 0, 0)
    assert stats.bucket_ms == HOUR_MS
    assert [b.total for b in stats.over_time] == [2]


def test_a_decision_in_the_window_is_timed_from_an_ask_before_it() -> None:
    def at(ts: int, event: ApprovalAsked | ApprovalDecided) -> LoggedEvent:
        return LoggedEvent(session_id="s", seq=ts, ts_ms=ts, event=event)

    events = [
        at(1_000, ApprovalAsked(id="q", tool_name="bash")),
        at(
            61_000, ApprovalDecided(id="q", outcome=Outcome.REJECTED, answerer="x", answered_by="p")
        ),
        at(62_000, ApprovalAsked(id="r", tool_name="edit")),  # pending
    ]
    stats = collect(events, since_ms=50_000)
    assert (stats.asked, stats.decided, stats.pending) == (1, 1, 1)
    assert stats.by_tool == (("edit", 1),)
    assert stats.by_person == (times("p", 60_000),)
    assert stats.histogram[5] == HistogramBin(low_ms=60_000, high_ms=120_000, count=1)
    # A decision logged before sources were recorded is counted by what it says.
    old = collect([at(1, ApprovalDecided(id="z", outcome=Outcome.ALLOWED_ONCE, remembered=True))])
    assert [row.source for row in old.by_source] == ["grant"]
    assert str(Source.GRANT) == "grant"


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 101))
    assert [percentile(values, p) for p in (50, 90, 99, 100)] == [50, 90, 99, 100]
    assert [percentile([7], p) for p in (50, 99)] == [7, 7]
    assert percentile([1, 2], 50) == 1
    assert percentile([1, 2, 3], 50) == 2


EXPECTED_TABLES = """\
by outcome
  OUTCOME       QUESTIONS
  allowed-once          5
  rejected              3
  cancelled             0
  unavailable           1

by source
  SOURCE       TOTAL  ALLOWED-ONCE  REJECTED  CANCELLED  UNAVAILABLE
  answerer         5             3         2          0            0
  rule             2             1         1          0            0
  grant            1             1         0          0            0
  no-answerer      1             0         0          0            1

by tool
  TOOL                       ASKED
  bash                           6
  <script>alert(1)</script>      1
  edit                           1
  write_file                     1

answer time by answerer (the answerer's name, or the source that decided)
  ANSWERER     COUNT      P50      P90      P99      MAX
  desk             5   4.000s  10.000s  10.000s  10.000s
  rule             2   0.000s   0.000s   0.000s   0.000s
  grant            1   0.000s   0.000s   0.000s   0.000s
  no-answerer      1  30.000s  30.000s  30.000s  30.000s

answer time by person (answeredBy)
  PERSON  COUNT     P50      P90      P99      MAX
  alice       3  2.000s   4.000s   4.000s   4.000s
  bob         2  8.000s  10.000s  10.000s  10.000s

grants: 2 given, 1 revoked, 1 expired
  TOOL  GIVEN  REVOKED  EXPIRED
  bash      2        1        1
"""


def test_the_command_prints_the_tables(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(store)]) == 0
    out = capsys.readouterr().out
    head, rest = out.split("\n\n", 1)
    assert re.fullmatch(
        rf"store file '{re.escape(str(store))}', all events \(\d{{4}}-\d\d-\d\d "
        r"01:00:00Z to \d{4}-\d\d-\d\d \d\d:00:10Z\)\n"
        r"questions: 9 asked, 9 decided, 0 pending, in 2 sessions",
        head,
    )
    assert rest == EXPECTED_TABLES


def test_the_command_takes_sqlite_urls_and_since(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stats", f"sqlite://{store}", "--since", "7d"]) == 0
    out = capsys.readouterr().out
    assert "questions: 2 asked, 2 decided, 0 pending, in 1 sessions\n" in out
    assert "  desk          2  2.000s  8.000s  8.000s  8.000s\n" in out
    assert "edit" not in out
    assert "grants: 0 given, 0 revoked, 0 expired\n  none\n" in out
    assert main(["stats", str(store), "--since", "45d"]) == 0
    assert "questions: 9 asked" in capsys.readouterr().out


@pytest.mark.slow
def test_the_command_as_a_process_writes_the_page(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "stats.html"
    page.write_text("old")
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-m",
            "broker.cli",
            "stats",
            str(store),
            "--html",
            str(page),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n\n", 1)[1] == EXPECTED_TABLES
    assert done.stderr == f"wrote {page}\n"
    text = page.read_text()
    assert text.startswith("<!doctype html>")
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["stats.html"]  # no temporary file left


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--since", "0"],
            "broker stats: argument --since: must be a duration above 0, got '0' "
            "(see broker stats --help)",
        ),
        (
            ["--since", "a week"],
            "broker stats: argument --since: expected a duration such as 90s, 30m, 2h or 1d, "
            "got 'a week' (see broker stats --help)",
        ),
        (
            ["--html", ""],
            "broker stats: argument --html: expected a file name such as stats.html, got '' "
            "(see broker stats --help)",
        ),
    ],
    ids=["since-zero", "since-words", "html-empty"],
)
def test_bad_arguments_are_one_line_and_exit_2(
    store: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stats", str(store), *argv])
    assert exited.value.code == 2
    assert capsys.readouterr().err == message + "\n"


def test_a_bad_store_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stats", "http://example.com/store"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        "broker stats: argument store: expected a file path, sqlite:///PATH or postgresql://…: "
        "pass the store the broker writes (see broker stats --help)\n"
    )
    missing = tmp_path / "nope.sqlite"
    assert main(["stats", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"broker stats: store file '{missing}' does not exist: check the path\n"
    )


def test_a_page_that_cannot_be_written_is_one_line_and_exit_2(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stats", str(store), "--html", str(tmp_path)])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (
        f"broker stats: argument --html: '{tmp_path}' is a folder: pass a file name inside "
        f"it, such as {tmp_path}/stats.html (see broker stats --help)\n"
    )
    nowhere = tmp_path / "missing" / "stats.html"
    assert main(["stats", str(store), "--html", str(nowhere)]) == 2
    assert capsys.readouterr().err == (
        f"broker stats: argument --html: cannot write '{nowhere}': No such file or directory: "
        "check that its folder exists and is writable, or pass another FILE\n"
    )
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        assert main(["stats", str(store), "--html", str(locked / "s.html")]) == 2
        assert "Permission denied" in capsys.readouterr().err
        assert list(locked.iterdir()) == []


def test_a_page_that_cannot_be_renamed_into_place_leaves_nothing_behind(tmp_path: Path) -> None:
    folder = tmp_path / "taken"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        write_page(folder, "<!doctype html>")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
    assert list(folder.iterdir()) == []


def test_the_page_shows_hostile_names_as_text(store: Path) -> None:
    page = render_html(read_stats(store))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count('<svg id="outcomes-chart"') == 1
    assert page.count('<svg id="answer-time-chart"') == 1
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page
    # A person's name and the store's name are escaped as well.
    hostile = attrs.evolve(
        read_stats(store),
        store='"><img src=x onerror=alert(2)>',
        by_person=(times("<b>eve</b>", 5),),
    )
    other = render_html(hostile)
    assert "<img" not in other
    assert "<b>" not in other
    assert "&lt;b&gt;eve&lt;/b&gt;" in other


async def test_the_page_for_an_open_store_renders_off_the_trio_thread(store: Path) -> None:
    limiter = trio.CapacityLimiter(1)
    page = await stats_page(store, limiter=limiter)
    assert page == render_html(read_stats(store))


@pytest.mark.slow
def test_a_postgresql_store_gives_the_same_stats(
    postgres_dsn: str, rules_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def open_store(clock: Clock) -> AbstractAsyncContextManager[EventStore]:
        return open_postgres_store(postgres_dsn, clock_ms=clock)

    trio.run(write_log, open_store, rules_file)
    stats = read_stats(postgres_dsn)
    check_everything(stats)
    assert stats.store is not None
    assert stats.store.startswith("postgresql store 'postgresql://")
    assert main(["stats", postgres_dsn]) == 0
    assert capsys.readouterr().out.split("\n\n", 1)[1] == EXPECTED_TABLES
