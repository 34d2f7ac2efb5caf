"""Approvals in the real Microsoft 365 Agents Playground (``emulator`` channel), in a real browser.

The Playground does not ask for user-specific views, so the shared card must carry the buttons
(``COUNTERSIGN_TEAMS_USER_VIEWS=auto``); its renderer leaves an emptied input out of a click's data, so a
cleared field must not approve the old value. The tests share one conversation and run in file order:
each finishes its approval before the next message (a new message would supersede a waiting card).
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.playground

TOP_CARD = ".ac-adaptiveCard:not(.ac-adaptiveCard .ac-adaptiveCard)"


def send(page, text: str) -> None:
    editor = page.locator("[data-lexical-editor='true']")
    editor.click()
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def cards(page):
    return page.locator(TOP_CARD)


def wait_for_card_count(page, count: int):
    cards(page).nth(count - 1).wait_for()
    return cards(page).nth(count - 1)


def test_chat_answers_in_the_page(page):
    send(page, "list files")
    page.get_by_text(re.compile("offline demo model")).first.wait_for()


def test_help_reads_at_phone_width(page, stack):
    before = cards(page).count()
    send(page, "help")
    card = wait_for_card_count(page, before + 1)
    card.get_by_text("approvals waiting for a decision").wait_for()
    command = card.get_by_text("pending", exact=True)
    meaning = card.get_by_text("approvals waiting for a decision", exact=True)
    # stacked: the meaning starts below its command, never squeezed into a column beside it
    assert meaning.bounding_box()["y"] > command.bounding_box()["y"]
    card.screenshot(path=str(stack.folder / "help.png"))


def test_approve_on_the_shared_card_deletes_the_file_once(page, stack):
    (stack.sandbox / "old.log").write_text("old\n")
    before = cards(page).count()
    send(page, "delete old.log")
    card = wait_for_card_count(page, before + 1)
    for button in ("Approve", "Reject", "Edit"):  # no user-specific views here: the buttons are for all
        card.get_by_role("button", name=button, exact=True).wait_for()

    card.get_by_role("button", name="Approve", exact=True).click()

    card.get_by_text(re.compile("Approved by")).first.wait_for()
    assert card.get_by_role("button", name="Approve", exact=True).count() == 0  # nothing left to click twice
    page.get_by_text(re.compile("Deleted old.log")).first.wait_for()
    assert not (stack.sandbox / "old.log").exists()
    ran = page.locator("li", has_text=re.compile(r'^delete_file\(path="old.log"\): Deleted old.log\.$'))
    assert ran.count() == 1  # one answer: it ran once


def test_reject_with_feedback(page, stack):
    (stack.sandbox / "keep.log").write_text("keep\n")
    before = cards(page).count()
    send(page, "delete keep.log")
    card = wait_for_card_count(page, before + 1)

    card.get_by_role("button", name="Reject", exact=True).click()
    feedback = card.locator("input, textarea").first
    feedback.fill("we still need it")
    card.get_by_role("button", name="Reject", exact=True).last.click()

    card.get_by_text(re.compile("Rejected by")).first.wait_for()
    card.get_by_text(re.compile("we still need it")).first.wait_for()
    assert (stack.sandbox / "keep.log").exists()


def test_edit_a_cleared_required_field_approves_nothing_then_an_edited_value_runs(page, stack):
    before = cards(page).count()
    send(page, "restart nginx")
    card = wait_for_card_count(page, before + 1)
    card.get_by_role("button", name="Edit", exact=True).click()
    service = card.get_by_label(re.compile("^service"))
    assert service.input_value() == "nginx"

    service.fill("")  # the case of the issue: service cleared, force ticked
    card.get_by_text("force").last.click()
    card.get_by_role("button", name="Save and approve").click()

    # isRequired: the renderer itself refuses (and if a host did send the click without the field, the
    # engine refuses it by the field: tests/adapters/teams/test_hosts.py)
    card.get_by_text(re.compile("service is required")).first.wait_for()
    card.get_by_role("button", name="Approve", exact=True).wait_for()  # still waiting: nothing approved
    assert "approved by" not in card.inner_text().lower()

    service.fill("apache")
    card.get_by_role("button", name="Save and approve").click()

    card.get_by_text(re.compile("Edited and approved by")).first.wait_for()
    shown = card.inner_text()
    assert "apache" in shown and "was nginx" in shown
    page.get_by_text(re.compile("apache")).last.wait_for()


def test_a_channel_thread_gets_the_card_and_the_answer_without_typing_errors(page, stack):
    (stack.sandbox / "chan.log").write_text("channel\n")
    page.get_by_text("General", exact=True).click()
    page.locator("[data-lexical-editor='true']").first.click()
    page.keyboard.type("@")
    page.get_by_text("Test Bot", exact=True).last.click()  # a channel message reaches the bot by @mention
    page.keyboard.type(" delete chan.log")
    page.get_by_role("button", name="Post", exact=True).click()

    card = cards(page).first
    card.get_by_role("button", name="Approve", exact=True).click()  # the buttons are on the shared card

    card.get_by_text(re.compile("Approved by")).first.wait_for()
    page.get_by_text(re.compile("deleted", re.IGNORECASE)).last.wait_for()  # the answer, in the reply chain
    assert not (stack.sandbox / "chan.log").exists()
    assert "Invalid conversation id" not in stack.playground.text()  # no typing sent into the reply chain
    assert " ERROR " not in stack.serve.text()
    assert stack.serve.text().count("App ID is not provided") == 1  # said once, not on every call
    assert "Connections:" not in stack.serve.text()  # the SDK stays at WARNING
