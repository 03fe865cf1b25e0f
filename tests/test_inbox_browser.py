"""The inbox page in a real browser: Debian's chromium, headless, driven by Playwright.

Each test runs a broker (in-memory store, remote answerer in its waterfall) and the inbox in its
trio run; the browser script runs in one worker thread (``trio.to_thread``) and reaches back
into trio with ``trio.from_thread`` to ask, abort and read decisions. Every browser step is
bounded by Playwright's timeout (10 s), every test by pytest-timeout.

Skipped, saying why, only where chromium cannot start. ``BROKER_INBOX_SCREENSHOT=PATH`` saves
the screenshot test's picture there (the README's ``design/inbox.png``).
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import pytest
import trio

from broker import (
    AbortSignal,
    ApprovalRequest,
    Broker,
    Decision,
    Outcome,
    Session,
    open_broker,
)
from broker._remote import process_owner
from broker.store.board import AnswerBoard, PendingQuestion

from .conftest import lines_of
from .inbox_support import TOKEN, Inbox, open_inbox

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
STEP_MS = 10_000
T = TypeVar("T")


@functools.cache
def chromium_problem() -> str | None:
    """Why chromium cannot be driven here, or None."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing: make system-deps installs Debian's chromium"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return "playwright is not installed: pip install -e '.[test]'"
    try:
        with sync_playwright() as playwright:
            playwright.chromium.launch(executable_path=CHROMIUM).close()
    except Exception as exc:
        return f"chromium cannot start: {str(exc).splitlines()[0]}"
    return None


def answered_text(outcome: str, by: str) -> re.Pattern[str]:
    """What a card says once its answer went through: "answered OUTCOME by BY" while the asker
    has not recorded it, or "settled as OUTCOME by BY" once the live feed said it was decided.
    The feed can beat the answer's own reply (the asker records at once), and a settled card
    has no .result any more: a test waits for either text on the whole card."""
    return re.compile(rf"(answered|settled as) {re.escape(outcome)} by {re.escape(by)}")


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)


CLICK_IF_PENDING = """([id, button]) => {
  const found = document.querySelector(`li[data-id="${id}"] .${button}`);
  if (found) found.click();
  return found !== null;
}"""


async def in_browser(script: Callable[[Browser], T]) -> T:
    """Run *script* with a fresh headless chromium, in a worker thread."""

    def run() -> T:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                return script(browser)
            finally:
                browser.close()

    return await trio.to_thread.run_sync(run)


@attrs.define
class Opened:
    page: Page
    dialogs: list[str]


def open_page(browser: Browser, inbox: Inbox, name: str | None = "alice") -> Opened:
    """A page of its own (own cookies: another person's browser), on the inbox, live."""
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    page.set_default_timeout(STEP_MS)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    response = page.goto(f"{inbox.url}/?token={TOKEN}")
    assert response is not None
    assert response.status == 200
    assert page.url == f"{inbox.url}/"  # the token left the address bar
    page.wait_for_selector("#connection.live")
    if name is not None:
        page.fill("#by", name)
    return Opened(page, dialogs)


@attrs.define
class Asker:
    """Questions asked in the test's trio run; their decisions, by question id."""

    broker: Broker
    session: Session
    nursery: trio.Nursery
    decided: dict[str, Decision] = attrs.field(factory=dict)
    signals: dict[str, AbortSignal] = attrs.field(factory=dict)
    all_signals: list[AbortSignal] = attrs.field(factory=list)
    _events: dict[str, trio.Event] = attrs.field(factory=dict)
    _count: int = 0

    async def ask(self, **fields: Any) -> str:
        """Ask one question; its id once it waits on the board."""
        self._count += 1
        fields = {"tool_name": "bash", "call_id": f"call_{self._count}"} | fields
        signal = AbortSignal()
        self.all_signals.append(signal)
        before = {q.id for q in await self.broker.pending()}
        done = trio.Event()
        ids: list[str] = []

        async def run() -> None:
            req = ApprovalRequest(agent=self.session.agent, signal=signal, **fields)
            decision = await self.broker.request_decision(req)
            self.decided[decision.id] = decision
            self._done(decision.id).set()
            done.set()

        self.nursery.start_soon(run)
        with trio.fail_after(5):
            while not ids:
                ids = [q.id for q in await self.broker.pending() if q.id not in before]
                if not ids and not done.is_set():
                    await trio.sleep(0.005)
        (qid,) = ids
        self.signals[qid] = signal
        return qid

    async def decision(self, qid: str) -> Decision:
        """The decision of *qid*, once made (bounded)."""
        with trio.fail_after(5):
            await self._done(qid).wait()
        return self.decided[qid]

    def _done(self, qid: str) -> trio.Event:
        return self._events.setdefault(qid, trio.Event())


@attrs.define(eq=False)
class FrozenFeedBoard:
    """The broker's board, except that :meth:`pending` can be frozen: the inbox then keeps
    showing what it showed (a stream that has not caught up yet), so a click on a question
    settled meanwhile is certain to reach the board late."""

    board: AnswerBoard
    frozen: list[PendingQuestion] | None = None

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        if self.frozen is not None:
            await trio.lowlevel.checkpoint()
            return list(self.frozen)
        return await self.board.pending(session_id)

    async def freeze(self) -> None:
        self.frozen = await self.board.pending()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.board, name)


@asynccontextmanager
async def asking(
    broker: Broker,
    session: Session,
    board: AnswerBoard | None = None,
    deadline: float | None = None,
) -> AsyncIterator[tuple[Asker, Inbox]]:
    async with broker.answerer(broker.remote_answerer(deadline=deadline)), session.turn():
        async with trio.open_nursery() as nursery, open_inbox(board or broker) as inbox:
            asker = Asker(broker, session, nursery)
            try:
                yield asker, inbox
            finally:
                # Questions left waiting are withdrawn, or the nursery would wait for them.
                for signal in asker.all_signals:
                    signal.abort("the test is over")


def ask(asker: Asker, **fields: Any) -> str:
    """From the browser's thread: ask in trio, return the question id."""
    return trio.from_thread.run(functools.partial(asker.ask, **fields))


def decision(asker: Asker, qid: str) -> Decision:
    return trio.from_thread.run(asker.decision, qid)


def card(page: Page, qid: str, where: str = "pending") -> Any:
    return page.locator(f'#{where} li[data-id="{qid}"]')


async def test_a_question_appears_without_reload_and_allow_once_decides_it(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> str:
            opened = open_page(browser, inbox)
            page = opened.page
            page.evaluate("window.__sameDocument = true")
            assert page.locator("#empty").is_visible()
            qid = ask(
                asker,
                reason="rm -rf build",
                display_reason="delete the build directory",
            )
            shown = card(page, qid)
            shown.wait_for()
            assert page.evaluate("window.__sameDocument") is True  # no reload happened
            assert shown.locator(".tool").text_content() == "bash"
            assert shown.locator(".call").text_content() == "call_1"
            assert shown.locator("dd").all_text_contents() == [
                "rm -rf build",
                "delete the build directory",
                approval_session.id,
                f"agent of session {approval_session.id}",
                process_owner(),
                qid,
            ]
            assert shown.locator(".waited").text_content().startswith("waiting ")
            assert shown.locator(".deadline").text_content() == "no deadline"
            assert page.locator("#pending-count").text_content() == "(1)"
            shown.get_by_role("button", name="Allow once").click()
            assert decision(asker, qid).outcome is Outcome.ALLOWED_ONCE
            settled = card(page, qid, "settled")
            settled.wait_for()
            assert settled.locator(".outcome").text_content() == "settled as allowed-once by alice"
            assert card(page, qid).count() == 0
            assert opened.dialogs == []
            return qid

        qid = await in_browser(script)
    made = asker.decided[qid]
    assert (made.outcome, made.answered_by) == (Outcome.ALLOWED_ONCE, "alice")
    lines = lines_of(approval_broker, approval_session)
    assert (
        f'{{"type":"approval/decided","data":{{"id":"{qid}","outcome":"allowed-once",'
        '"answeredBy":"alice","source":"answerer","answerer":"board",'
        '"answers":"allowed-once by alice (shared-token)"}}'
    ) in lines
    assert any(f'"type":"approval/asked","data":{{"id":"{qid}"' in line for line in lines)


async def test_reject_with_the_button_and_answers_from_the_keyboard(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> list[str]:
            page = open_page(browser, inbox, name="carol").page
            ids = [ask(asker, reason=f"question {n}") for n in range(3)]
            for qid in ids:
                card(page, qid).wait_for()
            card(page, ids[0]).get_by_role("button", name="Reject").click()
            assert decision(asker, ids[0]).outcome is Outcome.REJECTED
            card(page, ids[0], "settled").wait_for()
            # Focus moves with j/k; a allows the focused question once, r rejects it.
            page.locator("body").click(position={"x": 5, "y": 5})
            page.keyboard.press("j")
            assert page.evaluate("document.activeElement.dataset.id") == ids[1]
            page.keyboard.press("a")
            assert decision(asker, ids[1]).outcome is Outcome.ALLOWED_ONCE
            card(page, ids[1], "settled").wait_for()
            # The answered card left; focus went to the next one.
            assert page.evaluate("document.activeElement.dataset.id") == ids[2]
            page.keyboard.press("r")
            assert decision(asker, ids[2]).outcome is Outcome.REJECTED
            card(page, ids[2], "settled").wait_for()
            # Typing a name never answers: keys in the name field are text.
            page.fill("#by", "")
            page.locator("#by").press_sequentially("ar")
            assert page.input_value("#by") == "ar"
            return ids

        ids = await in_browser(script)
    assert [(asker.decided[q].outcome, asker.decided[q].answered_by) for q in ids] == [
        (Outcome.REJECTED, "carol"),
        (Outcome.ALLOWED_ONCE, "carol"),
        (Outcome.REJECTED, "carol"),
    ]


async def test_a_question_withdrawn_by_its_abort_signal_leaves_the_list_as_cancelled(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> str:
            page = open_page(browser, inbox).page
            qid = ask(asker, reason="about to be withdrawn")
            card(page, qid).wait_for()
            trio.from_thread.run_sync(asker.signals[qid].abort, "the user moved on")
            card(page, qid).wait_for(state="detached")
            settled = card(page, qid, "settled")
            assert settled.locator(".outcome").text_content() == "settled as cancelled"
            assert settled.get_by_role("button").count() == 0  # nothing left to answer
            assert page.locator("#empty").is_visible()
            return qid

        qid = await in_browser(script)
    assert asker.decided[qid].outcome is Outcome.CANCELLED


async def test_the_deadline_counts_down_and_an_expired_question_leaves_as_unavailable(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session, deadline=2.0) as (asker, inbox):

        def script(browser: Browser) -> str:
            page = open_page(browser, inbox).page
            qid = ask(asker, reason="nobody will answer this")
            shown = card(page, qid)
            shown.wait_for()
            assert re.fullmatch(
                r"deadline in [12] s", shown.locator(".deadline").text_content() or ""
            )
            settled = card(page, qid, "settled")
            settled.wait_for()  # within the 10 s step bound: the deadline is 2 s
            assert settled.locator(".outcome").text_content() == "settled as unavailable"
            return qid

        qid = await in_browser(script)
    assert asker.decided[qid].outcome is Outcome.UNAVAILABLE


XSS_REASON = '<img src=x onerror="window.__xss = 1; alert(1)">'
XSS_DISPLAY = "<script>window.__xss = 2; alert(2)</script>"
XSS_TOOL = "<b onmouseover=alert(3)>bash</b>"


async def test_markup_in_produced_fields_stays_inert_text(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> None:
            opened = open_page(browser, inbox)
            page = opened.page
            qid = ask(
                asker,
                tool_name=XSS_TOOL,
                call_id="</li><li>",
                reason=XSS_REASON,
                display_reason=XSS_DISPLAY + "\x1b[2K\u202eevil",
            )
            shown = card(page, qid)
            shown.wait_for()
            shown.hover()
            page.wait_for_timeout(300)  # room for an onerror/onload to fire, if any could
            assert opened.dialogs == []
            assert page.evaluate("window.__xss") is None
            for tag in ("img", "script", "b"):
                assert page.locator(f"main {tag}").count() == 0, tag
            assert page.locator("#pending > li").count() == 1
            assert shown.locator(".tool").text_content() == XSS_TOOL
            assert shown.locator(".call").text_content() == "</li><li>"
            reason, display = shown.locator("dd").all_text_contents()[:2]
            assert reason == XSS_REASON
            assert display == XSS_DISPLAY + "\\x1b[2K\\u202eevil"  # controls visibly escaped
            trio.from_thread.run_sync(asker.signals[qid].abort, "done")

        await in_browser(script)


async def test_without_the_token_a_browser_gets_401_no_data_and_cannot_answer(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> str:
            qid = ask(asker, reason="secret reason")
            stranger = browser.new_context().new_page()
            stranger.set_default_timeout(STEP_MS)
            for path in ("/", "/?token=wrong-token-0123456789", "/api/pending", "/events"):
                response = stranger.goto(f"{inbox.url}{path}")
                assert response is not None
                assert response.status == 401, path
                assert "secret reason" not in stranger.content()
                assert qid not in stranger.content()
            posted = stranger.request.post(
                f"{inbox.url}/api/answer",
                data={"id": qid, "outcome": "allowed-once", "by": "mallory"},
            )
            assert posted.status == 401
            return qid

        qid = await in_browser(script)
        status = await approval_broker.board.status(qid)
        assert status is not None
        assert (status.answer, status.settled) == (None, None)
        asker.signals[qid].abort("done")
        assert (await asker.decision(qid)).outcome is Outcome.CANCELLED


FORGE = """async ([id, csrf]) => {
  const headers = {"Content-Type": "application/json"};
  if (csrf !== null) headers["X-CSRF-Token"] = csrf;
  const response = await fetch("/api/answer", {
    method: "POST", headers, body: JSON.stringify({id, outcome: "allowed-once", by: "mallory"}),
  });
  return [response.status, await response.text()];
}"""


async def test_an_answer_without_the_right_csrf_token_is_403_and_records_nothing(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> str:
            page = open_page(browser, inbox).page
            qid = ask(asker, reason="guarded")
            card(page, qid).wait_for()
            for csrf in (None, "", "0" * 64):
                status, body = page.evaluate(FORGE, [qid, csrf])
                assert status == 403, csrf
                assert "csrf token missing or wrong" in body
            page.wait_for_timeout(300)  # several polls: nothing may have changed
            found = trio.from_thread.run(approval_broker.board.status, qid)
            assert found is not None
            assert (found.answer, found.settled) == (None, None)
            assert card(page, qid).is_visible()
            assert qid not in asker.decided
            # The page's own button carries the token and is taken.
            card(page, qid).get_by_role("button", name="Reject").click()
            assert decision(asker, qid).outcome is Outcome.REJECTED
            return qid

        qid = await in_browser(script)
    assert asker.decided[qid].answered_by == "alice"


async def test_two_browsers_answering_one_question_one_wins_the_other_sees_what_was_recorded(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):

        def script(browser: Browser) -> tuple[str, str]:
            alice = open_page(browser, inbox, name="alice").page
            bob = open_page(browser, inbox, name="bob").page
            qid = ask(asker, reason="contested")
            card(alice, qid).wait_for()
            card(bob, qid).wait_for()
            # Both click, usually before either page hears the outcome from the stream. On a
            # slow machine bob's page may already have settled the card (its buttons are gone):
            # then bob cannot click, and must still see what was recorded.
            clicked = [
                page.evaluate(CLICK_IF_PENDING, [qid, button])
                for page, button in ((alice, "allow"), (bob, "reject"))
            ]
            assert clicked[0] is True  # alice clicks first: her card is still pending
            made = decision(asker, qid)
            loser = bob if made.answered_by == "alice" else alice
            # The loser sees the recorded outcome: the refusal of its POST, or the settlement.
            loser.wait_for_function(
                """([id, outcome]) => [...document.querySelectorAll(`li[data-id="${id}"]`)]
                     .some((li) => li.textContent.includes(`recorded: ${outcome}`)
                                   || li.textContent.includes(`settled as ${outcome}`))""",
                arg=[qid, made.outcome.value],
            )
            text = loser.locator(f'li[data-id="{qid}"]').first.text_content() or ""
            assert made.answered_by is not None
            assert made.answered_by in text
            return qid, text

        qid, _loser_text = await in_browser(script)
    made = asker.decided[qid]
    assert (made.outcome, made.answered_by) in {
        (Outcome.ALLOWED_ONCE, "alice"),
        (Outcome.REJECTED, "bob"),
    }
    decided = [line for line in lines_of(approval_broker, approval_session) if qid in line]
    assert len(decided) == 2  # one asked, one decided: exactly one answer recorded


async def test_a_late_second_answer_is_refused_and_the_page_shows_what_was_recorded(
    approval_broker: Broker, approval_session: Session
) -> None:
    board = FrozenFeedBoard(approval_broker.board)
    async with asking(approval_broker, approval_session, board) as (asker, inbox):

        def script(browser: Browser) -> tuple[str, str]:
            alice = open_page(browser, inbox, name="alice").page
            bob = open_page(browser, inbox, name="bob").page
            qid = ask(asker, reason="contested")
            card(alice, qid).wait_for()
            card(bob, qid).wait_for()
            trio.from_thread.run(board.freeze)  # neither page will hear how it settled
            card(alice, qid).get_by_role("button", name="Allow once").click()
            assert decision(asker, qid).outcome is Outcome.ALLOWED_ONCE
            result = card(alice, qid).locator(".result")
            # The asker may have recorded the decision before the page read its POST's reply.
            done = "answered allowed-once by alice: waiting for the asker to record it"
            card(alice, qid).locator(".result", has_text=done).wait_for()
            assert result.text_content() == done
            card(bob, qid).get_by_role("button", name="Reject").click()
            refused = card(bob, qid).locator(".result")
            refused.get_by_text("refused:").wait_for()
            # A replay of alice's own answer is refused the same way.
            replay = card(alice, qid).locator(".result")
            alice.evaluate(
                f"document.querySelector('li[data-id=\"{qid}\"] .allow').disabled = false"
            )
            card(alice, qid).get_by_role("button", name="Allow once").click()
            replay.get_by_text("refused:").wait_for()
            return refused.text_content() or "", replay.text_content() or ""

        bob_saw, replay_saw = await in_browser(script)
    (qid,) = asker.decided
    expected = (
        f"refused: question '{qid}' is no longer pending: it was settled as allowed-once "
        "(recorded: allowed-once by alice)"
    )
    assert (bob_saw, replay_saw) == (expected, expected)
    made = asker.decided[qid]
    assert (made.outcome, made.answered_by) == (Outcome.ALLOWED_ONCE, "alice")


async def test_hundreds_of_pending_questions_stay_usable(
    approval_broker: Broker, approval_session: Session
) -> None:
    async with asking(approval_broker, approval_session) as (asker, inbox):
        ids = [await asker.ask(reason=f"question {n}") for n in range(300)]

        def script(browser: Browser) -> None:
            page = open_page(browser, inbox).page
            page.wait_for_function(
                "() => document.querySelectorAll('#pending > li').length === 300"
            )
            assert page.locator("#pending-count").text_content() == "(300)"
            last = card(page, ids[-1])
            last.focus()
            page.keyboard.press("a")
            assert decision(asker, ids[-1]).outcome is Outcome.ALLOWED_ONCE
            page.wait_for_function(
                "() => document.querySelectorAll('#pending > li').length === 299"
            )

        await in_browser(script)


async def test_a_screenshot_of_the_inbox(tmp_path: pathlib.Path) -> None:
    target = pathlib.Path(os.environ.get("BROKER_INBOX_SCREENSHOT", tmp_path / "inbox.png"))
    async with open_broker(store=str(tmp_path / "log.sqlite")) as broker:
        async with broker.open_session() as session, asking(broker, session) as (asker, inbox):

            def script(browser: Browser) -> None:
                page = open_page(browser, inbox, name="alice").page
                done = ask(asker, tool_name="bash", reason="git push --force origin main")
                card(page, done).get_by_role("button", name="Reject").click()
                card(page, done, "settled").wait_for()
                ask(
                    asker,
                    tool_name="bash",
                    reason="echo escalated > escalated.txt && cat escalated.txt",
                    display_reason="run with workspace-write access: the user asked to write "
                    "escalated.txt in the workspace",
                )
                ask(asker, tool_name="write_file", reason="write src/app.py (42 lines)")
                ask(asker, tool_name="bash", reason="<img src=x onerror=alert(1)>\x1b[2K")
                page.wait_for_function(
                    "() => document.querySelectorAll('#pending > li').length === 3"
                )
                card(page, done, "settled").locator("a.session-link").click()
                page.locator("#session-rows tr.approval-decided").wait_for()
                page.locator("#pending > li").first.focus()
                page.evaluate("() => window.scrollTo(0, 0)")  # the sticky header on top
                page.screenshot(path=str(target), full_page=True)

            await in_browser(script)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_the_session_view_shows_the_log_paired_with_who_answered(
    tmp_path: pathlib.Path,
) -> None:
    async with open_broker(store=str(tmp_path / "log.sqlite")) as broker:
        async with broker.open_session() as session, asking(broker, session) as (asker, inbox):

            def script(browser: Browser) -> tuple[str, list[str]]:
                page = open_page(browser, inbox).page
                qid = ask(asker, reason="rm -rf build <b>now</b>")
                card(page, qid).get_by_role("button", name="Allow once").click()
                assert decision(asker, qid).outcome is Outcome.ALLOWED_ONCE
                settled = card(page, qid, "settled")
                settled.locator("a.session-link").click()
                page.locator("#session-rows tr.approval-decided").wait_for()
                assert page.locator("#session-id").text_content() == session.id
                assert page.locator("#session-view b").count() == 0
                return qid, page.locator("#session-rows td.event").all_text_contents()

            qid, rows = await in_browser(script)
    assert rows[0] == "turn 1 started"
    assert re.fullmatch(
        rf"asked {qid} tool bash call call_1 \(rm -rf build <b>now</b>\) -> decided at "
        r"#(\d+) after \d+\.\d{3}s",
        rows[1],
    )
    assert re.fullmatch(
        rf"decided {qid} allowed-once by alice \[answerer: board\] — answers: allowed-once "
        rf"by alice \(shared-token\) \(asked at #\d+, \d+\.\d{{3}}s\)",
        rows[2],
    )


async def test_a_grant_is_revoked_with_its_button(tmp_path: pathlib.Path) -> None:
    store = str(tmp_path / "log.sqlite")
    async with open_broker(store=store) as broker, broker.open_session() as session:
        grant = await broker.remember(session, "bash", command="npm run", by="alice")
        async with open_inbox(broker) as inbox:

            def script(browser: Browser) -> str:
                page = open_page(browser, inbox, name="bob").page
                row = page.locator(f'#grants li[data-id="{grant.id}"]')
                row.wait_for()
                assert row.locator(".rule").text_content() == "bash: npm run"
                assert row.locator(".status").text_content() == "active"
                row.get_by_role("button", name="Revoke").click()
                page.wait_for_function(
                    "id => document.querySelector(`#grants li[data-id='${id}'] .status`)"
                    ".textContent === 'revoked by bob'",
                    arg=grant.id,
                )
                # A revoked grant offers no button any more.
                assert row.get_by_role("button", name="Revoke").count() == 0
                return str(row.locator(".status").text_content())

            shown = await in_browser(script)
        revocation = await broker.board.grant_revocation(grant.id)
    assert shown == "revoked by bob"
    assert revocation is not None
    assert revocation.by == "bob"
