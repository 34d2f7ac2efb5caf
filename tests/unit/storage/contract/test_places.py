"""Where approvals were shown, on both backends: recorded once per place, and only those places count."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import StorageError
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, new_approval

LATER = NOW + timedelta(minutes=5)


@pytest.fixture
async def approvals(storage):
    await create_run(storage, status="paused")
    return await storage.approvals.create_many([new_approval(tool_call_id=f"call_{n}") for n in (1, 2)])


async def test_places_an_approval_was_shown_in_are_recorded_once_and_only_those_count(backend, approvals):
    places = backend.storage.places
    first, second = (a.approval_id for a in approvals)
    assert not await places.shown_in(first, "slack:C1")  # shown nowhere yet

    await places.record([first, second], "slack:C1", now=NOW)
    await places.record([first, first], "slack:C1", now=LATER)  # again: no change
    await places.record([first], "slack:home:U_BOB", now=LATER)
    await places.record([], "slack:C7", now=LATER)  # nothing to record

    assert await places.shown_in(first, "slack:C1") and await places.shown_in(second, "slack:C1")
    assert await places.shown_in(first, "slack:home:U_BOB")
    assert not await places.shown_in(second, "slack:home:U_BOB")
    assert not await places.shown_in(first, "slack:C2")
    assert not await places.shown_in("appr-unknown", "slack:C1")
    other = await backend.open_another()
    assert await other.places.shown_in(second, "slack:C1"), "durable: another process sees it"


async def test_a_place_is_a_key_and_the_ids_a_list(storage, approvals):
    with pytest.raises(ValueError):
        await storage.places.record([approvals[0].approval_id], "")
    with pytest.raises(ValueError):
        await storage.places.record(approvals[0].approval_id, "slack:C1")  # a bare string is not a list of ids
    assert not await storage.places.shown_in(approvals[0].approval_id, "")


async def test_only_a_stored_approval_can_be_shown(storage):
    with pytest.raises(StorageError):
        await storage.places.record(["appr-unknown"], "slack:C1")
    assert not await storage.places.shown_in("appr-unknown", "slack:C1")


async def test_approvals_stored_with_the_place_they_are_shown_in_are_shown_there_and_a_clash_records_none(storage):
    from storage import AlreadyExists

    await create_run(storage, status="paused")
    first, second = await storage.approvals.create_many(
        [new_approval(tool_call_id=f"call_{n}") for n in (1, 2)], shown_in="slack:C1", shown_at=NOW
    )
    assert await storage.places.shown_in(first.approval_id, "slack:C1")
    assert await storage.places.shown_in(second.approval_id, "slack:C1")
    assert (await storage.approvals.get_clicked(second.approval_id, "slack:C1")).shown_here
    assert not await storage.places.shown_in(first.approval_id, "slack:C2")
    # A clash (a pending approval for call_1 exists) stores neither the approvals nor where they were shown.
    third = new_approval(tool_call_id="call_3", approval_id="appr-third")
    with pytest.raises(AlreadyExists):
        await storage.approvals.create_many([third, new_approval(tool_call_id="call_1")], shown_in="slack:C9")
    assert not await storage.places.shown_in("appr-third", "slack:C9")
    with pytest.raises(ValueError):
        await storage.approvals.create_many([new_approval(tool_call_id="call_4")], shown_in="")
