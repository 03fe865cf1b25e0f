"""A person signs in to the inbox with their own token, in Chromium (issue 35): the name field
shows who they are and cannot be changed, and their answer is recorded as theirs."""

from __future__ import annotations

import pathlib

import pytest

from .serve_support import decision, finish, hook_input, service, start_hook, wait_pending
from .test_inbox_browser import CHROMIUM, answered_text, chromium_problem
from .test_people import add

pytestmark = pytest.mark.slow
STEP_MS = 10_000


def test_a_person_signed_in_answers_as_themselves_in_chromium(tmp_path: pathlib.Path) -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    store = tmp_path / "serve.sqlite"
    token = add(str(store), "alice", "ops")
    with service(tmp_path, "--inbox", "0", store=store) as running:
        [address] = [
            line.removeprefix("broker inbox: ").strip().split("?token=")[0]
            for line in running.banner
            if line.startswith("broker inbox: ")
        ]
        asking = start_hook("claude-code", hook_input("make deploy"), running.socket)
        (row,) = wait_pending(store)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                page = browser.new_page()
                page.set_default_timeout(STEP_MS)
                page.goto(f"{address}?token={token}")
                assert "token" not in page.url  # traded for a cookie
                name = page.locator("#by")
                assert name.input_value() == "alice"
                assert name.evaluate("input => input.readOnly")
                card = page.locator(f'li[data-id="{row["id"]}"]')
                card.locator("input.message").fill("deploy after the freeze")
                card.locator("button.reject").click()
                card.filter(has_text=answered_text("rejected", "alice")).wait_for()
            finally:
                browser.close()
        status, out, _ = finish(asking)
    assert status == 0
    assert decision(out)["permissionDecisionReason"] == (
        "broker: rejected by alice: do not run this call; ask the user what to do instead; "
        "they said: deploy after the freeze"
    )


def test_an_approver_sees_their_question_in_chromium_and_others_do_not(
    tmp_path: pathlib.Path,
) -> None:
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    store = tmp_path / "serve.sqlite"
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\ndecision = "ask"\ntool = "Bash"\napprovers = ["group:ops"]\n')
    alice = add(str(store), "alice", "ops")
    bob = add(str(store), "bob")
    with service(tmp_path, "--inbox", "0", "--rules", str(rules), store=store) as running:
        [address] = [
            line.removeprefix("broker inbox: ").strip().split("?token=")[0]
            for line in running.banner
            if line.startswith("broker inbox: ")
        ]
        asking = start_hook("claude-code", hook_input("make deploy"), running.socket)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                theirs = browser.new_context().new_page()
                theirs.set_default_timeout(STEP_MS)
                theirs.goto(f"{address}?token={alice}")
                card = theirs.locator("li.question").filter(has_text="make deploy")
                card.wait_for()
                assert "Only by" in card.inner_text()
                others = browser.new_context().new_page()
                others.set_default_timeout(STEP_MS)
                others.goto(f"{address}?token={bob}")
                others.wait_for_timeout(3000)  # past a listing round
                assert others.locator("li.question").count() == 0
                card.locator("button.allow").click()
                card.filter(has_text=answered_text("allowed-once", "alice")).wait_for()
            finally:
                browser.close()
        status, out, _ = finish(asking)
    assert status == 0
    assert decision(out)["permissionDecision"] == "allow"


def test_two_person_approval_in_chromium(tmp_path: pathlib.Path) -> None:
    """quorum = 2 through broker serve: alice's click is an approval shown as "1 of 2
    approvals, by alice" on her page and, a listing round later, on bob's; bob's click decides,
    and the hook gets the allow."""
    problem = chromium_problem()
    if problem is not None:
        pytest.skip(problem)
    from playwright.sync_api import sync_playwright

    store = tmp_path / "serve.sqlite"
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rules]]\ndecision = "ask"\ntool = "Bash"\napprovers = ["group:ops"]\nquorum = 2\n'
    )
    alice = add(str(store), "alice", "ops")
    bob = add(str(store), "bob", "ops")
    with service(tmp_path, "--inbox", "0", "--rules", str(rules), store=store) as running:
        [address] = [
            line.removeprefix("broker inbox: ").strip().split("?token=")[0]
            for line in running.banner
            if line.startswith("broker inbox: ")
        ]
        asking = start_hook("claude-code", hook_input("make deploy"), running.socket)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM)
            try:
                pages = []
                for token in (alice, bob):
                    page = browser.new_context().new_page()
                    page.set_default_timeout(STEP_MS)
                    page.goto(f"{address}?token={token}")
                    pages.append(page.locator("li.question").filter(has_text="make deploy"))
                alices, bobs = pages
                alices.wait_for()
                assert "0 of 2 approvals" in alices.inner_text()
                alices.locator("button.allow").click()
                alices.locator(".result").filter(
                    has_text="your approval is recorded: 1 of 2 approvals, by alice"
                ).wait_for()
                assert "1 of 2 approvals, by alice" in alices.locator(".approvals").inner_text()
                # A reconnect's snapshot (the feed never carries approvers' questions) leaves
                # the card where it is: still pending, once, with its count.
                page_of_alice = alices.page
                page_of_alice.evaluate("connect()")
                page_of_alice.wait_for_timeout(500)
                mine = page_of_alice.locator("#pending li.question")
                assert mine.count() == 1
                assert page_of_alice.locator("#settled li.question").count() == 0
                assert "1 of 2 approvals, by alice" in mine.inner_text()
                bobs.locator(".approvals").filter(has_text="1 of 2 approvals, by alice").wait_for()
                bobs.locator("button.allow").click()
                bobs.locator(".result").filter(has_text="answered allowed-once").wait_for()
            finally:
                browser.close()
        status, out, _ = finish(asking)
    assert status == 0
    assert decision(out)["permissionDecision"] == "allow"
