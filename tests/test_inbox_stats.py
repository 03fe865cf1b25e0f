"""The inbox links to ``broker stats --html`` of its store (issue 36, item 3): ``GET /stats``
serves the same page, behind the inbox's sign-in, with the page's own Content-Security-Policy
(its inline style allowed, nothing loaded or run); in Chromium it opens from the inbox's link
without an error."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import trio

from broker.stats import CSP, stats_page
from broker.store import MemoryBoard, answer_board

from .inbox_support import TOKEN, http, open_inbox
from .test_inbox_browser import CHROMIUM, STEP_MS, chromium_problem
from .test_stats import HOSTILE, rules_file, store

__all__ = ["rules_file", "store"]  # the module-scoped fixtures of test_stats

BEARER = {"authorization": f"Bearer {TOKEN}"}


async def test_the_inbox_serves_its_stores_stats_page(store: Path) -> None:
    with trio.fail_after(20):
        async with open_inbox(answer_board(str(store))) as inbox:
            page = await http(inbox.port, "GET", "/stats", headers=BEARER)
            stranger = await http(inbox.port, "GET", "/stats")
        async with open_inbox(MemoryBoard()) as memory:
            none = await http(memory.port, "GET", "/stats", headers=BEARER)
        expected = await stats_page(store)
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CSP  # the page's own, not the inbox's
    assert page.headers["x-frame-options"] == "DENY"  # the other security headers stay
    # The same page as broker stats --html (its "generated at" line aside).
    same = [line for line in expected.splitlines() if "generated" not in line]
    assert [line for line in page.body.decode().splitlines() if "generated" not in line] == same
    assert html.escape(HOSTILE) in page.body.decode()
    assert HOSTILE not in page.body.decode()
    assert stranger.status == 401
    assert (none.status, none.body) == (
        404,
        b"no statistics here: the inbox reads them from a SQLite or PostgreSQL store\n",
    )


@pytest.mark.slow
def test_the_inbox_links_to_the_page_and_it_opens_without_errors(store: Path) -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    async def serve(ready: trio.MemorySendChannel[int], done: trio.Event) -> None:
        async with open_inbox(answer_board(str(store))) as inbox:
            await ready.send(inbox.port)
            await done.wait()

    def browse(port: int) -> list[str]:
        problems: list[str] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                page = browser.new_page()
                page.set_default_timeout(STEP_MS)
                page.goto(f"http://127.0.0.1:{port}/?token={TOKEN}")
                with page.context.expect_page() as opened:
                    page.locator("a.stats-link").click()
                stats = opened.value
                stats.on("console", lambda m: problems.append(f"console {m.type}: {m.text}"))
                stats.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                stats.wait_for_load_state()
                stats.reload()  # listening from the start this time
                stats.wait_for_load_state()
                assert stats.locator("svg").count() >= 2
                assert HOSTILE in stats.inner_text("body")  # shown as text
            finally:
                browser.close()
        return problems

    async def main() -> list[str]:
        send, receive = trio.open_memory_channel[int](1)
        done = trio.Event()
        problems: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, send, done)
            port = await receive.receive()
            try:
                problems = await trio.to_thread.run_sync(browse, port)
            finally:
                done.set()
        return problems

    assert trio.run(main) == []
