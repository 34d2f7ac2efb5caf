"""Runs on both backends: compare-and-set status changes, snapshots, the thread's active run."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path

import pytest

from bot.agent import AgentSnapshot
from bot.agent.snapshot import snapshot_data, snapshot_from_data
from bot.agent.stored_snapshot import load_snapshot
from storage import AlreadyExists, CorruptRecord, NotFound
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD

OLD_SNAPSHOT = Path(__file__).parents[3] / "fixtures" / "snapshot_v1_stdlib_json.json"
SNAPSHOT = {"schema_version": 1, "messages": [{"role": "user", "text": "delete a.txt"}], "step": 1}


async def test_a_created_run_reads_back_with_utc_times(storage):
    created = await create_run(storage)
    run = await storage.runs.get("run-1")
    assert run == created
    assert (run.status, run.requester, run.chat_history_id, run.step) == ("running", "U_ANA", THREAD, 0)
    assert run.created_at == NOW and run.created_at.tzinfo == UTC
    assert not run.has_snapshot and run.error is None


async def test_unknown_runs_are_not_found_and_ids_are_used_once(storage):
    with pytest.raises(NotFound, match="run-404"):
        await storage.runs.get("run-404")
    with pytest.raises(NotFound):
        await storage.runs.transition("run-404", "paused", "resuming")
    await create_run(storage)
    with pytest.raises(AlreadyExists):
        await create_run(storage)


async def test_transition_wins_only_from_the_expected_status(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", "running", "paused", step=2)
    assert not await storage.runs.transition("run-1", "running", "paused")
    assert await storage.runs.transition("run-1", "paused", "resuming")
    assert not await storage.runs.transition("run-1", "paused", "resuming")  # the second click
    run = await storage.runs.get("run-1")
    assert (run.status, run.step) == ("resuming", 2)


async def test_transition_accepts_several_sources_and_stores_error_and_snapshot(storage):
    await create_run(storage, status="paused")
    assert await storage.runs.transition(
        "run-1", ("running", "paused", "resuming"), "failed", error="tool set changed", snapshot_json=SNAPSHOT
    )
    run = await storage.runs.get("run-1")
    assert (run.status, run.error, run.has_snapshot) == ("failed", "tool set changed", True)
    assert await storage.runs.snapshot("run-1") == SNAPSHOT


async def test_terminal_runs_unknown_statuses_and_fields_are_refused(storage):
    await create_run(storage)
    with pytest.raises(ValueError, match="terminal"):
        await storage.runs.transition("run-1", "finished", "running")
    with pytest.raises(ValueError, match="unknown run status"):
        await storage.runs.transition("run-1", "running", "sleeping")
    with pytest.raises(ValueError, match="requester"):
        await storage.runs.transition("run-1", "running", "paused", requester="U_EVE")
    assert (await storage.runs.get("run-1")).status == "running"


async def test_a_snapshot_round_trips_and_an_invalid_one_is_refused(storage):
    await create_run(storage)
    with pytest.raises(NotFound, match="no snapshot"):
        await storage.runs.snapshot("run-1")
    with pytest.raises(ValueError, match="run-1"):
        await storage.runs.save_snapshot("run-1", '{"messages": [')
    await storage.runs.save_snapshot("run-1", json.dumps(SNAPSHOT))
    assert await storage.runs.snapshot("run-1") == SNAPSHOT
    await storage.runs.save_snapshot("run-1", {**SNAPSHOT, "step": 2})  # a dict is accepted too
    assert (await storage.runs.snapshot("run-1"))["step"] == 2
    with pytest.raises(NotFound):
        await storage.runs.save_snapshot("run-404", SNAPSHOT)


async def test_a_stored_snapshot_that_is_not_an_object_names_the_run(backend):
    await create_run(backend.storage)
    await backend.execute("UPDATE runs SET snapshot_json = '[1, 2]' WHERE run_id = 'run-1'")
    with pytest.raises(CorruptRecord, match="run-1") as caught:
        await backend.storage.runs.snapshot("run-1")
    assert (caught.value.kind, caught.value.record_id) == ("run", "run-1")
    assert (await backend.storage.runs.get("run-1")).status == "running"


async def test_the_active_run_of_a_thread(storage):
    assert await storage.runs.active_for_thread(THREAD) is None
    await create_run(storage, "run-1", status="finished")
    await create_run(storage, "run-2", status="paused")
    await create_run(storage, "run-other", thread="slack:T1:C9:1.1")
    assert (await storage.runs.active_for_thread(THREAD)).run_id == "run-2"
    await storage.runs.transition("run-2", "paused", "expired")
    assert await storage.runs.active_for_thread(THREAD) is None


async def test_the_latest_run_of_a_thread_whatever_its_status(storage):
    assert await storage.runs.latest_for_thread(THREAD) is None
    await create_run(storage, "run-1", status="paused", requester="U_ANA")
    await create_run(storage, "run-other", thread="slack:T1:C9:1.1", requester="U_OTHER")
    assert (await storage.runs.latest_for_thread(THREAD)).run_id == "run-1"
    await storage.runs.transition("run-1", "paused", "finished")
    await create_run(storage, "run-2", status="finished", requester="U_BEA")
    latest = await storage.runs.latest_for_thread(THREAD)
    assert (latest.run_id, latest.requester) == ("run-2", "U_BEA")


async def test_runs_listed_by_status_oldest_first(storage):
    await create_run(storage, "run-b", status="paused")
    # Same time: creation order breaks the tie (another thread: a thread has one active run).
    await create_run(storage, "run-a", status="resuming", thread="slack:T1:C9:1.1")
    await create_run(storage, "run-c", status="finished")
    assert [r.run_id for r in await storage.runs.list_by_status("paused", "resuming")] == ["run-b", "run-a"]
    assert await storage.runs.list_by_status("failed") == []


async def test_a_snapshot_stored_by_the_standard_library_encoder_still_resumes(backend):
    # Rows written before orjson: json.dumps's spacing and escapes. (PostgreSQL's json type refuses NaN,
    # so the fixture's NaN is replaced here; the snapshot test reads it from the file itself.)
    data = json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))
    data["state"]["ratio"] = 0.5
    old_text = json.dumps(data).replace("«", "\\u00ab")  # an escape as ensure_ascii would have written
    await create_run(backend.storage)
    await backend.execute(f"UPDATE runs SET snapshot_json = '{old_text}' WHERE run_id = 'run-1'")

    snapshot = snapshot_from_data(await backend.storage.runs.snapshot("run-1"))
    # The engine's loader takes it as it is: self-contained, no history to read (the thread has none).
    loaded = await load_snapshot(await backend.storage.runs.snapshot("run-1"), backend.storage.messages)

    assert snapshot == loaded == AgentSnapshot.from_dict(data)
    assert snapshot.messages[1].text == "nettoie «prod» ✓"


async def test_a_snapshot_given_as_data_is_stored_once_encoded_and_reads_back_equal(storage):
    await create_run(storage)
    data = json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))
    data["state"]["ratio"] = 0.5
    snapshot = AgentSnapshot.from_dict(data)

    assert await storage.runs.transition("run-1", "running", "paused", snapshot_json=snapshot_data(snapshot), step=1)

    assert snapshot_from_data(await storage.runs.snapshot("run-1")) == snapshot


async def test_a_runs_token_usage_is_stored_and_summed_per_workspace_channel_and_period(storage):
    from datetime import timedelta

    from storage import TokenUsage

    await create_run(storage, "run-old", thread="slack:T1:C1:1.0", now=NOW - timedelta(days=10), status="finished")
    await create_run(storage, "run-1", thread="slack:T1:C1:2.0")
    await storage.runs.create(
        "run-2",
        chat_history_id="slack:T1:C2:3.0",
        platform="slack",
        workspace="T1",
        channel="C2",
        thread="3.0",
        requester="U_BO",
        now=NOW,
    )
    await storage.runs.create(
        "run-x",
        chat_history_id="slack:T9:C1:4.0",
        platform="slack",
        workspace="T9",
        channel="C1",
        thread="4.0",
        requester="U_BO",
        now=NOW,
    )
    await storage.runs.record_usage("run-old", TokenUsage(1000, 1000, 2000))
    await storage.runs.record_usage("run-1", TokenUsage(10, 5, 15))
    await storage.runs.record_usage("run-1", TokenUsage(21, 7, 28))  # the total so far replaces the last one
    await storage.runs.record_usage("run-2", TokenUsage(100, 50, 150))
    await storage.runs.record_usage("run-x", TokenUsage(9, 9, 18))
    since = NOW - timedelta(days=7)

    assert await storage.runs.usage(platform="slack", workspace="T1", since=since) == TokenUsage(121, 57, 178, runs=2)
    assert await storage.runs.usage(platform="slack", workspace="T1", since=since, channel="C1") == TokenUsage(
        21, 7, 28, runs=1
    )
    assert await storage.runs.usage(platform="teams", workspace="T1", since=since) == TokenUsage()
    with pytest.raises(NotFound):
        await storage.runs.record_usage("run-404", TokenUsage(1, 1, 2))


async def test_a_transition_records_the_runs_token_usage_in_its_own_write_and_a_refused_one_none(storage):
    from datetime import timedelta

    from storage import TokenUsage

    await create_run(storage)
    since = NOW - timedelta(days=1)
    assert await storage.runs.transition("run-1", "running", "paused", usage=TokenUsage(21, 7, 28), step=1)
    assert (await storage.runs.get("run-1")).status == "paused"
    assert await storage.runs.usage(platform="slack", workspace="T1", since=since) == TokenUsage(21, 7, 28, runs=1)
    # A transition that does not happen (a second click, a lost race) records nothing either.
    assert not await storage.runs.transition("run-1", "running", "finished", usage=TokenUsage(90, 9, 99))
    assert await storage.runs.usage(platform="slack", workspace="T1", since=since) == TokenUsage(21, 7, 28, runs=1)


async def test_a_run_may_end_stopped_and_never_moves_again(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", ("running", "resuming"), "stopped", error="stopped by U_ANA")
    run = await storage.runs.get("run-1")
    assert (run.status, run.owner, run.is_active) == ("stopped", None, False)
    with pytest.raises(ValueError, match="terminal"):
        await storage.runs.transition("run-1", "stopped", "running")


async def test_any_process_may_ask_a_working_run_to_stop_and_the_first_asker_is_kept(storage):
    await create_run(storage)
    await create_run(storage, "run-p", thread="slack:T1:C1:2.0", status="paused")

    assert await storage.runs.request_stop("run-1", "U_ANA")
    assert await storage.runs.request_stop("run-1", "U_ADMIN")  # still working: asked again, first asker kept
    assert not await storage.runs.request_stop("run-p", "U_ANA")  # paused: its approval decides, not Stop
    assert (await storage.runs.get("run-1")).stop_requested_by == "U_ANA"
    assert (await storage.runs.get("run-p")).stop_requested_by is None
    with pytest.raises(NotFound):
        await storage.runs.request_stop("run-404", "U_ANA")
