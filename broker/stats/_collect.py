"""What a session log says about its questions, counted: :class:`Stats` from logged events.

Synopsis::

    stats = collect(events, since_ms=now_ms - 7 * 86_400_000)   # events: LoggedEvent, any order
    stats.by_outcome        # ((Outcome.ALLOWED_ONCE, 12), (Outcome.REJECTED, 3), ...)
    stats.by_answerer       # (AnswerTimes(key="inbox", count=9, p50_ms=..., ...), ...)

Pure: no I/O, no clock (the window's start is given). What is counted, and how, is
``design/stats.md``.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

import attrs

from .._events import ApprovalAsked, ApprovalDecided, ApprovalGrant, ApprovalRevoke, Event
from .._vocabulary import Outcome

__all__ = [
    "HISTOGRAM_BOUNDS_MS",
    "AnswerTimes",
    "Bucket",
    "GrantCount",
    "HistogramBin",
    "LoggedEvent",
    "SourceCount",
    "Stats",
    "collect",
    "percentile",
]

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
WEEK_MS = 7 * DAY_MS
#: At most this many bars in the outcomes-over-time chart: the bucket grows (hour, day, week,
#: then whole weeks) until the window fits.
MAX_BUCKETS = 60
#: The answer-time histogram's bins: each bound is the (exclusive) end of one bin and the start
#: of the next; the last bin is open-ended.
HISTOGRAM_BOUNDS_MS = (1_000, 5_000, 15_000, 30_000, 60_000, 120_000, 300_000, 900_000, HOUR_MS)
#: What a decision recorded before sources were logged is counted as.
UNRECORDED = "unrecorded"


@attrs.frozen(kw_only=True)
class LoggedEvent:
    """One event of a session log, where and when it was stored (``ts_ms``: the store's commit
    time, ms since the epoch)."""

    session_id: str
    seq: int
    ts_ms: int
    event: Event


@attrs.frozen(kw_only=True)
class SourceCount:
    """The decisions one source made (``source`` of ``approval/decided``), by outcome."""

    source: str
    total: int
    outcomes: tuple[tuple[Outcome, int], ...]

    def count(self, outcome: Outcome) -> int:
        """How many of them ended *outcome*."""
        return dict(self.outcomes).get(outcome, 0)


@attrs.frozen(kw_only=True)
class AnswerTimes:
    """Answer times of one answerer (or source) or one person: how many, and their
    nearest-rank percentiles in ms."""

    key: str
    count: int
    p50_ms: int
    p90_ms: int
    p99_ms: int
    max_ms: int


@attrs.frozen(kw_only=True)
class GrantCount:
    """Grants of one tool given, revoked (by someone) and ended by their expiry."""

    tool_name: str
    given: int = 0
    revoked: int = 0
    expired: int = 0


@attrs.frozen(kw_only=True)
class Bucket:
    """The decisions stored in ``[start_ms, start_ms + Stats.bucket_ms)``, by outcome (every
    outcome listed, in the vocabulary's order)."""

    start_ms: int
    outcomes: tuple[tuple[Outcome, int], ...]

    @property
    def total(self) -> int:
        """All decisions of the bucket."""
        return sum(count for _, count in self.outcomes)


@attrs.frozen(kw_only=True)
class HistogramBin:
    """Answer times in ``[low_ms, high_ms)`` (``high_ms`` None: no upper end)."""

    low_ms: int
    high_ms: int | None
    count: int


@attrs.frozen(kw_only=True)
class Stats:
    """What a log says about its questions in a window (``since_ms``: None for all of it).

    Questions are counted at their ``approval/asked``, decisions at their ``approval/decided``,
    grants at their ``approval/grant`` and revocations at their ``approval/revoke``, each when
    stored inside the window. ``store`` names where the events were read (for titles).
    """

    since_ms: int | None = None
    store: str | None = None
    #: The first and last stored time of an event counted (None: nothing in the window).
    first_ms: int | None = None
    last_ms: int | None = None
    sessions: int = 0
    asked: int = 0
    decided: int = 0
    #: Asked in the window and not decided (yet) in the log read.
    pending: int = 0
    by_outcome: tuple[tuple[Outcome, int], ...] = ()
    by_source: tuple[SourceCount, ...] = ()
    by_tool: tuple[tuple[str, int], ...] = ()
    by_answerer: tuple[AnswerTimes, ...] = ()
    by_person: tuple[AnswerTimes, ...] = ()
    grants_given: int = 0
    grants_revoked: int = 0
    grants_expired: int = 0
    grants_by_tool: tuple[GrantCount, ...] = ()
    #: Outcomes over time: equal buckets of ``bucket_ms``, from the first decision's bucket to
    #: the last's (empty ones included).
    bucket_ms: int = HOUR_MS
    over_time: tuple[Bucket, ...] = ()
    #: The answer-time distribution of the decisions an answerer made or ran out of time on.
    histogram: tuple[HistogramBin, ...] = ()


def percentile(sorted_ms: list[int], p: float) -> int:
    """The nearest-rank *p*-th percentile of the ascending, non-empty *sorted_ms*: the
    smallest value with at least *p* percent of the values at or below it."""
    rank = max(1, math.ceil(p / 100 * len(sorted_ms)))
    return sorted_ms[rank - 1]


def _times(key: str, values: list[int]) -> AnswerTimes:
    ordered = sorted(values)
    return AnswerTimes(
        key=key,
        count=len(ordered),
        p50_ms=percentile(ordered, 50),
        p90_ms=percentile(ordered, 90),
        p99_ms=percentile(ordered, 99),
        max_ms=ordered[-1],
    )


def source_of(decided: ApprovalDecided) -> str:
    """The source a decision is counted under: its recorded ``source``; for a decision logged
    without one, ``recovered`` (recovery closed a crash tail), ``policy`` (the never policy),
    ``grant`` (remembered), else ``unrecorded``."""
    if decided.source is not None:
        return str(decided.source)
    if decided.recovered:
        return "recovered"
    if decided.policy is not None:
        return "policy"
    if decided.remembered:
        return "grant"
    return UNRECORDED


def _by_count(counter: Counter[str]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(counter.items(), key=lambda item: (-item[1], item[0])))


def _bucket_size(first_ms: int, last_ms: int) -> int:
    span = last_ms - first_ms
    for size in (HOUR_MS, DAY_MS, WEEK_MS):
        if span // size + 1 <= MAX_BUCKETS:
            return size
    weeks = math.ceil((span // WEEK_MS + 1) / MAX_BUCKETS)
    return weeks * WEEK_MS


def _over_time(decisions: list[tuple[int, Outcome]]) -> tuple[int, tuple[Bucket, ...]]:
    if not decisions:
        return HOUR_MS, ()
    first = min(ts for ts, _ in decisions)
    last = max(ts for ts, _ in decisions)
    size = _bucket_size(first, last)
    start = first - first % size
    counts: defaultdict[int, Counter[Outcome]] = defaultdict(Counter)
    for ts, outcome in decisions:
        counts[(ts - start) // size][outcome] += 1
    buckets = tuple(
        Bucket(
            start_ms=start + index * size,
            outcomes=tuple((outcome, counts[index][outcome]) for outcome in Outcome),
        )
        for index in range((last - start) // size + 1)
    )
    return size, buckets


def _histogram(values: list[int]) -> tuple[HistogramBin, ...]:
    lows = (0, *HISTOGRAM_BOUNDS_MS)
    highs: tuple[int | None, ...] = (*HISTOGRAM_BOUNDS_MS, None)
    return tuple(
        HistogramBin(
            low_ms=low,
            high_ms=high,
            count=sum(1 for v in values if v >= low and (high is None or v < high)),
        )
        for low, high in zip(lows, highs, strict=True)
    )


def collect(events: Iterable[LoggedEvent], *, since_ms: int | None = None) -> Stats:
    """Count *events* (every session's, each session's in seq order; sessions may interleave)
    stored at or after *since_ms* (None: all). An answer time pairs a decision in the window
    with its ``approval/asked`` (same session, same id) wherever that lies in *events*."""
    asked_at: dict[tuple[str, str], int] = {}
    asked_in_window: set[tuple[str, str]] = set()
    decided_ids: set[tuple[str, str]] = set()
    tools: Counter[str] = Counter()
    outcomes: Counter[Outcome] = Counter()
    sources: defaultdict[str, Counter[Outcome]] = defaultdict(Counter)
    answerer_times: defaultdict[str, list[int]] = defaultdict(list)
    person_times: defaultdict[str, list[int]] = defaultdict(list)
    histogram_values: list[int] = []
    decisions: list[tuple[int, Outcome]] = []
    grant_tools: dict[tuple[str, str], str] = {}
    grants: defaultdict[str, Counter[str]] = defaultdict(Counter)
    sessions: set[str] = set()
    first: int | None = None
    last: int | None = None
    for logged in events:
        event, sid, ts = logged.event, logged.session_id, logged.ts_ms
        inside = since_ms is None or ts >= since_ms
        if isinstance(event, ApprovalAsked):
            asked_at.setdefault((sid, event.id), ts)
        elif isinstance(event, ApprovalDecided):
            decided_ids.add((sid, event.id))
        elif isinstance(event, ApprovalGrant):
            grant_tools[(sid, event.id or event.tool_name)] = event.tool_name
        if not inside:
            continue
        counted = True
        if isinstance(event, ApprovalAsked):
            asked_in_window.add((sid, event.id))
            tools[event.tool_name] += 1
        elif isinstance(event, ApprovalDecided):
            outcomes[event.outcome] += 1
            source = source_of(event)
            sources[source][event.outcome] += 1
            decisions.append((ts, event.outcome))
            started = asked_at.get((sid, event.id))
            if started is not None:
                took = max(0, ts - started)
                answerer_times[event.answerer or source].append(took)
                if event.answered_by is not None:
                    person_times[event.answered_by].append(took)
                if event.answerer is not None:
                    histogram_values.append(took)
        elif isinstance(event, ApprovalGrant):
            grants[event.tool_name]["given"] += 1
        elif isinstance(event, ApprovalRevoke):
            key = event.id if event.id is not None else event.tool_name
            tool = grant_tools.get((sid, key or ""), event.tool_name or "?")
            grants[tool]["expired" if event.expired else "revoked"] += 1
        else:
            counted = False
        if counted:
            sessions.add(sid)
            first = ts if first is None else min(first, ts)
            last = ts if last is None else max(last, ts)
    bucket_ms, over_time = _over_time(decisions)
    grant_rows = tuple(
        GrantCount(
            tool_name=tool,
            given=counts["given"],
            revoked=counts["revoked"],
            expired=counts["expired"],
        )
        for tool, counts in sorted(grants.items())
    )
    return Stats(
        since_ms=since_ms,
        first_ms=first,
        last_ms=last,
        sessions=len(sessions),
        asked=tools.total(),
        decided=outcomes.total(),
        pending=len(asked_in_window - decided_ids),
        by_outcome=tuple((outcome, outcomes[outcome]) for outcome in Outcome),
        by_source=tuple(
            SourceCount(
                source=source,
                total=counts.total(),
                outcomes=tuple((outcome, counts[outcome]) for outcome in Outcome),
            )
            for source, counts in sorted(sources.items(), key=lambda i: (-i[1].total(), i[0]))
        ),
        by_tool=_by_count(tools),
        by_answerer=tuple(
            _times(key, values)
            for key, values in sorted(answerer_times.items(), key=lambda i: (-len(i[1]), i[0]))
        ),
        by_person=tuple(
            _times(key, values)
            for key, values in sorted(person_times.items(), key=lambda i: (-len(i[1]), i[0]))
        ),
        grants_given=sum(row.given for row in grant_rows),
        grants_revoked=sum(row.revoked for row in grant_rows),
        grants_expired=sum(row.expired for row in grant_rows),
        grants_by_tool=grant_rows,
        bucket_ms=bucket_ms,
        over_time=over_time,
        histogram=_histogram(histogram_values),
    )
