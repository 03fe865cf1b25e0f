"""The library behind ``broker log``: list, show, verify, export and import a SQLite store.

Every function returns data or raises (:class:`LogToolError` and its subclasses, or
:class:`~broker.store.StoreOpenError` when the file cannot be opened); printing is the CLI's
job. ``show``, ``verify`` and ``export`` open the store read-only (one snapshot, no lock), so they
never change the file and work while a broker is writing to it.

Export format: a session is exported as the JSON lines of its events, exactly as
:func:`broker._codec.encode_event` produced them (seed-compatible ``session.jsonl``), one per line,
each ending in ``\\n``. All sessions are exported into a directory: one ``<id>.jsonl`` per session
(the id percent-encoded, see :func:`session_file_name`) plus ``index.json`` listing id, parent,
file, event count and head hash per session, in creation order.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio

from .._codec import EventDecodeError, decode_event, encode_event
from .._errors import BrokerError
from .._events import ApprovalAsked, ApprovalDecided
from .._private_files import create_private_file, make_private_dirs
from .._projection import ApprovalState, fold
from ._chain import GENESIS, chain_hash
from ._checkpoint import (
    PROJECTION_FINGERPRINT,
    CheckpointDecodeError,
    decode_state,
    encode_state,
)
from ._group_store import GroupStore
from ._invariants import SessionChecker, Violation
from ._open import open_store
from ._protocol import StoreError
from ._url import PostgresUrl, parse_store_url, redact_dsn
from .sqlite import open_sqlite_reader

if TYPE_CHECKING:
    from .._events import Event
    from ._recovery import RecoveryReport
    from ._rows import SessionInfo, StoredCheckpoint, StoreReader

__all__ = [
    "ExportSummary",
    "ImportLineError",
    "ImportSummary",
    "LogToolError",
    "SessionSummary",
    "Timeline",
    "TimelineEntry",
    "VerifyError",
    "VerifySummary",
    "export_all",
    "import_file",
    "list_sessions",
    "parse_jsonl",
    "session_file_name",
    "session_id_from_file_name",
    "session_lines",
    "show_session",
    "timed_line",
    "verify_reader",
    "verify_store",
]

INDEX_FILE = "index.json"


class LogToolError(BrokerError):
    """A log tool could not do what was asked (unknown session, unreadable file, ...)."""


class VerifyError(LogToolError):
    """The first violated rule of a store; ``violation`` says where and why."""

    def __init__(self, where: str, violation: Violation) -> None:
        super().__init__(f"{where}: {violation.message()}")
        self.violation = violation


class ImportLineError(LogToolError):
    """A line of an import file is not a valid event; nothing was imported."""

    def __init__(self, source: str, line_number: int, reason: str) -> None:
        super().__init__(
            f"import file '{source}' line {line_number}: {reason}; fix the line and import "
            "again (nothing was imported)"
        )
        self.line_number = line_number
        self.reason = reason


@attrs.frozen(kw_only=True)
class SessionSummary:
    """One session of a store, for listings."""

    session_id: str
    parent_id: str | None
    created_ms: int
    events: int
    head_hash: str

    @classmethod
    def of(cls, info: SessionInfo) -> SessionSummary:
        """From a sessions-table row."""
        return cls(
            session_id=info.session_id,
            parent_id=info.parent_id,
            created_ms=info.created_ms,
            events=info.head_seq,
            head_hash=info.head_hash.hex(),
        )


@attrs.frozen(kw_only=True)
class TimelineEntry:
    """One event of a timeline, with its asked/decided partner.

    For an ``asked``, ``pair_seq`` is the seq of its ``decided`` (None while pending); for a
    ``decided``, the seq of its ``asked``. ``duration_ms`` is the time from ask to decision.
    """

    seq: int
    ts_ms: int
    event: Event
    pair_seq: int | None = None
    duration_ms: int | None = None


@attrs.frozen(kw_only=True)
class Timeline:
    """A session's events in order, asked/decided paired."""

    session: SessionSummary
    entries: tuple[TimelineEntry, ...]


@attrs.frozen(kw_only=True)
class VerifySummary:
    """What a successful verify checked."""

    sessions: int
    events: int
    checkpoints: int
    pending: int
    #: Checkpoints folded by another version of the projection code: not compared (a writer
    #: of this version ignores and replaces them).
    stale_checkpoints: int = 0

    def summary(self) -> str:
        """The one-line report."""
        line = (
            f"ok: {self.sessions} sessions, {self.events} events, {self.checkpoints} checkpoints "
            "verified (hash chains, turn order, turn enclosure, pairing, checkpoints)"
        )
        if self.pending:
            line += f"; {self.pending} asks still pending"
        if self.stale_checkpoints:
            line += f"; {self.stale_checkpoints} checkpoints of another projection version skipped"
        return line


@attrs.frozen(kw_only=True)
class ExportSummary:
    """Where :func:`export_all` wrote each session."""

    directory: str
    files: tuple[tuple[str, str], ...]  # (session id, file name)
    events: int


@attrs.frozen(kw_only=True)
class ImportSummary:
    """What :func:`import_file` stored."""

    session_id: str
    parent_id: str | None
    events: int
    recovery: RecoveryReport


def _unknown_session(reader: StoreReader, store: str, session_id: str) -> LogToolError:
    return LogToolError(
        f"session {session_id!r} is not in {reader.where}: run 'broker log show {store}' "
        "to list its sessions"
    )


def _shown(store: str | os.PathLike[str]) -> str:
    """*store* as a command line repeats it (a URL without its password)."""
    text = os.fspath(store)
    return redact_dsn(text) if isinstance(parse_store_url(text), PostgresUrl) else text


@contextmanager
def open_reader(store: str | os.PathLike[str]) -> Iterator[StoreReader]:
    """A read-only snapshot of the store *store* names (a path, ``sqlite:///…`` or
    ``postgresql://…``) for the ``with`` block; nothing is written."""
    where = parse_store_url(store)
    if isinstance(where, PostgresUrl):
        from .postgres import open_postgres_reader  # psycopg only when asked for

        with open_postgres_reader(where.dsn) as postgres:
            yield postgres
        return
    with open_sqlite_reader(where.path) as sqlite:
        yield sqlite


def list_sessions(path: str | os.PathLike[str]) -> list[SessionSummary]:
    """Every session of the store at *path*, in creation order (read-only)."""
    with open_reader(path) as reader:
        return [SessionSummary.of(info) for info in reader.sessions()]


def show_session(path: str | os.PathLike[str], session_id: str) -> Timeline:
    """*session_id*'s timeline (read-only). Raises :class:`LogToolError` if it is unknown or a
    row is not a valid event."""
    with open_reader(path) as reader:
        info = reader.session(session_id)
        if info is None:
            raise _unknown_session(reader, _shown(path), session_id)
        rows: list[tuple[int, int, Event]] = []
        for row in reader.linked_rows(session_id):
            try:
                rows.append((row.seq, row.ts_ms, decode_event(row.line)))
            except EventDecodeError as exc:
                raise LogToolError(
                    f"{reader.where}: session {session_id!r} seq {row.seq} is not a "
                    f"valid event ({exc}): run 'broker log verify {_shown(path)}'"
                ) from exc
    asked: dict[str, tuple[int, int]] = {}
    decided: dict[str, tuple[int, int]] = {}
    for seq, ts_ms, event in rows:
        if isinstance(event, ApprovalAsked):
            asked.setdefault(event.id, (seq, ts_ms))
        elif isinstance(event, ApprovalDecided):
            decided.setdefault(event.id, (seq, ts_ms))
    entries: list[TimelineEntry] = []
    for seq, ts_ms, event in rows:
        pair: tuple[int, int] | None = None
        duration: int | None = None
        if isinstance(event, ApprovalAsked):
            pair = decided.get(event.id)
            if pair is not None and pair[0] > seq:
                duration = pair[1] - ts_ms
        elif isinstance(event, ApprovalDecided):
            pair = asked.get(event.id)
            if pair is not None and pair[0] < seq:
                duration = ts_ms - pair[1]
        entries.append(
            TimelineEntry(
                seq=seq,
                ts_ms=ts_ms,
                event=event,
                pair_seq=None if pair is None else pair[0],
                duration_ms=duration,
            )
        )
    return Timeline(session=SessionSummary.of(info), entries=tuple(entries))


def _verify_session(
    reader: StoreReader,
    info: SessionInfo,
    checkpoint: StoredCheckpoint | None,
    allow_pending: bool,
) -> tuple[Violation | None, int]:
    session_id = info.session_id

    def violation(seq: int, rule: str, detail: str) -> tuple[Violation, int]:
        return Violation(session_id=session_id, seq=seq, rule=rule, detail=detail), 0

    checker = SessionChecker(session_id, allow_pending=allow_pending)
    state = ApprovalState()
    prev, last = GENESIS, 0
    for row in reader.rows(session_id):
        if row.seq != last + 1:
            return violation(
                row.seq,
                "chain",
                f"seq {row.seq} follows seq {last}: seq {last + 1} is missing "
                "(a row was deleted, inserted or renumbered)",
            )
        if row.prev_hash != prev:
            before = "the genesis hash" if last == 0 else f"the hash of seq {last}"
            return violation(
                row.seq,
                "chain",
                f"prev_hash does not match {before} "
                "(a row was modified, deleted, reordered or inserted)",
            )
        if chain_hash(session_id, row.seq, row.ts_ms, row.line, row.prev_hash) != row.hash:
            return violation(
                row.seq, "chain", "hash does not match the row's content (the row was modified)"
            )
        try:
            event = decode_event(row.line)
        except EventDecodeError as exc:
            return violation(row.seq, "event", f"not a valid event: {exc}")
        if encode_event(event) != row.line:
            return violation(
                row.seq, "event", "line is not in the canonical form encode_event produces"
            )
        found = checker.feed(row.seq, event)
        if found is not None:
            return found, 0
        state = fold(state, event)
        if checkpoint is not None and checkpoint.seq == row.seq:
            try:
                stored = decode_state(checkpoint.state)
            except CheckpointDecodeError as exc:
                return violation(row.seq, "checkpoint", f"checkpoint is unreadable: {exc}")
            if stored != state:
                return violation(
                    row.seq,
                    "checkpoint",
                    f"checkpoint {checkpoint.state} does not match a re-fold of seq 1..{row.seq} "
                    f"({encode_state(state)})",
                )
        prev, last = row.hash, row.seq
    if last != info.head_seq or prev != info.head_hash:
        return violation(
            last,
            "chain",
            f"the log ends at seq {last} but the session's recorded head is seq {info.head_seq} "
            "with another hash (rows were appended or deleted behind the store's back)",
        )
    if checkpoint is not None and (checkpoint.seq > last or checkpoint.seq < 1):
        return violation(
            checkpoint.seq,
            "checkpoint",
            f"checkpoint at seq {checkpoint.seq} lies outside the log (seq 1..{last})",
        )
    return checker.finish(), checker.pending


def verify_store(path: str | os.PathLike[str], *, allow_pending: bool = False) -> VerifySummary:
    """Check every session of the store at *path* (read-only); raise :class:`VerifyError` on the
    FIRST violation (sessions in creation order, rows in seq order).

    Checked: the hash chain and the recorded head of each session, that every row is a valid
    event in canonical form, the rules of :mod:`broker.store._invariants`, and that each
    checkpoint equals a re-fold of the events it covers. *allow_pending* accepts asks without a
    decision (a live store, or a crash tail not yet recovered).
    """
    with open_reader(path) as reader:
        return verify_reader(reader, allow_pending=allow_pending)


def verify_reader(reader: StoreReader, *, allow_pending: bool = False) -> VerifySummary:
    """:func:`verify_store` on a store's read-only snapshot (any store)."""
    sessions = reader.sessions()
    known = {info.session_id for info in sessions}
    stored = reader.checkpoints()
    checkpoints = {cp.session_id: cp for cp in stored if cp.projection == PROJECTION_FINGERPRINT}
    stale = {cp.session_id: cp for cp in stored if cp.projection != PROJECTION_FINGERPRINT}
    events = pending = 0
    for info in sessions:
        found, still_pending = _verify_session(
            reader, info, checkpoints.get(info.session_id), allow_pending
        )
        if found is not None:
            raise VerifyError(reader.where, found)
        events += info.head_seq
        pending += still_pending
    for session_id, seq, detail in reader.broken_links():
        raise VerifyError(
            reader.where, Violation(session_id=session_id, seq=seq, rule="chain", detail=detail)
        )
    for session_id in reader.orphan_session_ids():
        raise VerifyError(
            reader.where,
            Violation(
                session_id=session_id,
                seq=0,
                rule="chain",
                detail="events exist for a session missing from the sessions table "
                "(a session row was deleted)",
            ),
        )
    every = checkpoints | stale
    for session_id in sorted(set(every) - known):
        raise VerifyError(
            reader.where,
            Violation(
                session_id=session_id,
                seq=every[session_id].seq,
                rule="checkpoint",
                detail="checkpoint of a session missing from the sessions table",
            ),
        )
    return VerifySummary(
        sessions=len(sessions),
        events=events,
        checkpoints=len(checkpoints),
        pending=pending,
        stale_checkpoints=len(stale),
    )


def timed_line(line: str, ts_ms: int) -> str:
    """*line* with its commit time in front: ``{"time":"2026-01-02T03:04:05.000Z","type":…}``.

    The rest of the line stays byte-for-byte as stored; the time is UTC with milliseconds.
    """
    moment = datetime.fromtimestamp(ts_ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f'{{"time":"{moment}.{ts_ms % 1000:03d}Z",{line[1:]}'


def session_lines(
    path: str | os.PathLike[str], session_id: str, *, with_time: bool = False
) -> list[str]:
    """*session_id*'s JSON lines (no newlines), exactly as stored (read-only); with
    *with_time*, each with its commit time in front (:func:`timed_line`)."""
    with open_reader(path) as reader:
        if reader.session(session_id) is None:
            raise _unknown_session(reader, _shown(path), session_id)
        if with_time:
            return [timed_line(row.line, row.ts_ms) for row in reader.linked_rows(session_id)]
        return [row.line for row in reader.linked_rows(session_id)]


def session_file_name(session_id: str) -> str:
    """The export file name of *session_id*: percent-encoded (no ``/``), plus ``.jsonl``."""
    return urllib.parse.quote(session_id, safe="") + ".jsonl"


def session_id_from_file_name(path: str | os.PathLike[str]) -> str:
    """The session id an export file name stands for (inverse of :func:`session_file_name`)."""
    name = Path(path).name
    stem = name.removesuffix(".jsonl") if name.endswith(".jsonl") else Path(name).stem
    return urllib.parse.unquote(stem)


def _write_atomically(target: Path, text: str) -> None:
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    create_private_file(partial)  # 0600 whatever the umask: the log's contents
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)


def export_all(
    path: str | os.PathLike[str], directory: str | os.PathLike[str], *, with_time: bool = False
) -> ExportSummary:
    """Export every session of the store at *path* into *directory* (created if missing): one
    ``<id>.jsonl`` per session plus ``index.json``. Existing files of the same names are
    replaced; nothing else in the directory is touched. The store is only read. With
    *with_time*, each line carries its commit time (:func:`timed_line`).
    """
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise LogToolError(
            f"export directory '{out}' is a file: pass a directory (it is created if missing)"
        )
    try:
        make_private_dirs(out)
    except OSError as exc:
        raise LogToolError(
            f"cannot create export directory '{out}': {exc.strerror or exc}; check the path"
        ) from exc
    files: list[tuple[str, str]] = []
    index: list[dict[str, object]] = []
    total = 0
    with open_reader(path) as reader:
        for info in reader.sessions():
            name = session_file_name(info.session_id)
            lines = [
                timed_line(row.line, row.ts_ms) if with_time else row.line
                for row in reader.rows(info.session_id)
            ]
            try:
                _write_atomically(out / name, "".join(line + "\n" for line in lines))
            except OSError as exc:
                raise LogToolError(
                    f"cannot write export file '{out / name}': {exc.strerror or exc}"
                ) from exc
            files.append((info.session_id, name))
            total += len(lines)
            index.append(
                {
                    "id": info.session_id,
                    "parent": info.parent_id,
                    "file": name,
                    "events": len(lines),
                    "headHash": info.head_hash.hex(),
                }
            )
    manifest = {"store": _shown(path), "sessions": index}
    _write_atomically(out / INDEX_FILE, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return ExportSummary(directory=str(out), files=tuple(files), events=total)


def parse_jsonl(text: str, *, source: str) -> list[Event]:
    """Decode an export file's text: one event per ``\\n``-terminated line, no blank lines.

    Raises :class:`ImportLineError` naming *source*, the 1-based line number and the reason, at
    the first bad line; also when the events break an audit rule (except pending asks).
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    events: list[Event] = []
    checker = SessionChecker(source, allow_pending=True)
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            raise ImportLineError(source, number, "empty line (expected one JSON event per line)")
        try:
            event = decode_event(line)
        except EventDecodeError as exc:
            raise ImportLineError(source, number, str(exc)) from exc
        found = checker.feed(number, event)
        if found is not None:
            raise ImportLineError(source, number, f"rule {found.rule}: {found.detail}")
        events.append(event)
    return events


def _check_parent(store_path: str | os.PathLike[str], parent_id: str) -> None:
    """Raise :class:`LogToolError` unless *parent_id* is a session of the store (before any
    write: a child must not point at a session the store does not hold)."""
    hint = "import the parent session first, or leave out --parent"
    where = parse_store_url(store_path)
    if not isinstance(where, PostgresUrl) and not os.path.exists(where.path):
        raise LogToolError(
            f"parent session {parent_id!r} is not in store file '{where.path}' "
            f"(the file does not exist yet): {hint}"
        )
    with open_reader(store_path) as reader:
        if reader.session(parent_id) is None:
            raise LogToolError(f"parent session {parent_id!r} is not in {reader.where}: {hint}")


async def import_file(
    store_path: str | os.PathLike[str],
    file: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    parent_id: str | None = None,
) -> ImportSummary:
    """Import the JSON-lines *file* as a NEW session of the store at *store_path*, in one
    transaction: either every event is stored or none is.

    The session id defaults to the file's name (see :func:`session_id_from_file_name`). The
    file is parsed completely before the store is opened, so a bad line changes nothing; a file
    with no events, or a *parent_id* the store does not hold, is refused the same way.
    Opening the store for writing runs recovery (reported in the summary). Lines are stored in
    canonical form (re-encoded), so an export of the import is byte-identical for canonical input.
    Cancellation: before the store is opened nothing happens; after, as for
    :meth:`SqliteStore.import_session` (the import may land).
    """
    source = os.fspath(file)
    try:
        text = await trio.Path(source).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LogToolError(
            f"import file '{source}' is not UTF-8 text ({exc.reason} at byte {exc.start}): "
            "convert it to UTF-8"
        ) from exc
    except OSError as exc:
        raise LogToolError(
            f"cannot read import file '{source}': {exc.strerror or exc}; check the path"
        ) from exc
    events = parse_jsonl(text, source=source)
    if not events:
        raise LogToolError(
            f"import file '{source}' has no events: pass a file written by "
            "`broker log export` (one JSON event per line)"
        )
    target = session_id if session_id is not None else session_id_from_file_name(source)
    if parent_id is not None:
        _check_parent(store_path, parent_id)
    failure: StoreError | None = None
    async with open_store(store_path) as store:
        assert isinstance(store, GroupStore)  # open_store opens the durable stores only
        recovery = store.recovery
        try:
            await store.import_session(target, parent_id, events)
        except StoreError as exc:
            # Raised after the block, as itself rather than wrapped by the writer's nursery.
            failure = exc
    if failure is not None:
        raise failure
    return ImportSummary(
        session_id=target, parent_id=parent_id, events=len(events), recovery=recovery
    )
