"""The real Claude Code CLI's question answered from the web inbox in Chromium (issue 34): the
person sees the agent, its session and the exact command, clicks Allow once, and the file
lands; the log records who answered."""

from __future__ import annotations

import pathlib
import threading

import pytest

from tests.agents.claude_code import CompletedRun
from tests.agents.model_api import ScriptedAnthropic, Text, ToolUse
from tests.agents.test_claude_code_broker import COMMAND, decided, run
from tests.serve_support import service, wait_pending
from tests.test_inbox_browser import CHROMIUM, answered_text, chromium_problem

pytestmark = pytest.mark.slow
STEP_MS = 10_000


def test_allowed_from_the_inbox_in_chromium_the_file_lands(tmp_path: pathlib.Path) -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    work = tmp_path / "work"
    with service(tmp_path, "--inbox", "0") as running:
        [address] = [
            line.removeprefix("broker inbox: ").strip()
            for line in running.banner
            if line.startswith("broker inbox: ")
        ]
        with ScriptedAnthropic([ToolUse(COMMAND), Text("done")]) as api:
            runs: list[CompletedRun] = []
            agent = threading.Thread(target=lambda: runs.append(run(work, api, running.socket)))
            agent.start()
            try:
                (row,) = wait_pending(running.store)
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=CHROMIUM)
                    try:
                        page = browser.new_page()
                        page.set_default_timeout(STEP_MS)
                        page.goto(address)
                        card = page.locator(f'li[data-id="{row["id"]}"]')
                        card.wait_for()
                        shown = card.inner_text()
                        assert "Claude Code session" in shown
                        assert COMMAND in shown
                        page.fill("#by", "carol")
                        card.locator("button.allow").click()
                        card.filter(has_text=answered_text("allowed-once", "carol")).wait_for()
                    finally:
                        browser.close()
            finally:
                agent.join(90)
            [completed] = runs
    assert (work / "out.txt").read_text() == "hi\n"
    [pair] = decided(running.store, completed)
    assert (pair["outcome"], pair["source"], pair["answeredBy"]) == (
        "allowed-once",
        "answerer",
        "carol",
    )
