"""The ``broker stats --html`` page in a real browser: Debian's chromium, headless, driven by
Playwright as the inbox's browser tests do (skipped, saying why, only where chromium cannot
start). The page is opened from its file: nothing may fail (no console error, no page error,
no request), the two charts are drawn, and the hostile tool name is text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from broker.cli import main

from .test_inbox_browser import CHROMIUM, STEP_MS, chromium_problem
from .test_stats import HOSTILE, rules_file, store

__all__ = ["rules_file", "store"]  # the module-scoped fixtures, shared with test_stats

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)


def test_the_page_opens_without_errors_and_draws_its_charts(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page_file = tmp_path / "stats.html"
    assert main(["stats", str(store), "--html", str(page_file)]) == 0
    capsys.readouterr()
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    requests: list[str] = []
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 900})
            page.set_default_timeout(STEP_MS)

            def on_console(message: Any) -> None:
                if message.type in ("error", "warning"):
                    problems.append(f"console {message.type}: {message.text}")

            def on_dialog(dialog: Any) -> None:
                dialogs.append(dialog.message)
                dialog.dismiss()

            page.on("console", on_console)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("dialog", on_dialog)
            page.on("request", lambda request: requests.append(request.url))
            response = page.goto(page_file.as_uri(), wait_until="load")
            assert response is not None
            assert response.ok
            counts = page.evaluate(
                """() => ({
                  outcomes: document.querySelectorAll('#outcomes-chart rect.bar').length,
                  histogram: document.querySelectorAll('#answer-time-chart rect.bar').length,
                  svgs: document.querySelectorAll('svg').length,
                  scripts: document.querySelectorAll('script').length,
                  width: document.querySelector('#outcomes-chart').getBoundingClientRect().width,
                })"""
            )
            tools = page.locator('table[data-table="tool"] td:first-child').all_inner_texts()
            grants = page.locator("#grants").inner_text()
        finally:
            browser.close()
    assert problems == []
    assert dialogs == []
    assert requests == [page_file.as_uri()]  # the page itself, nothing else
    # Outcomes: the old day (allowed, rejected, unavailable) and the recent day (allowed,
    # rejected): one rect per non-empty outcome; the histogram: the 1-5 s and 5-15 s bins.
    assert counts["outcomes"] == 5
    assert counts["histogram"] == 2
    assert counts["svgs"] == 2
    assert counts["scripts"] == 0
    assert counts["width"] > 300
    assert HOSTILE in tools  # shown as the text it is
    assert grants == "2 given, 1 revoked, 1 expired"
