"""Runs: compare-and-set status changes, snapshots, and the thread's active run."""

from __future__ import annotations

import json
from datetime import UTC

import pytest

from storage import AlreadyExists, CorruptRecord, NotFound
from tests.fakes.storage_data import NOW, THREAD, create_run

SNAPSHOT = {"schema_version": 1, "messages": [{"role": "user", "text": "delete a.txt"}], "step": 1}


def test_a_created_run_reads_back_with_utc_times(storage):
    created = create_run(storage)
    run = storage.runs.get("run-1")
    assert run == created
    assert (run.status, run.requester, run.chat_history_id, run.step) == ("running", "U_ANA", THREAD, 0)
    assert run.created_at == NOW and run.created_at.tzinfo == UTC
    assert not run.has_snapshot


def test_an_unknown_run_is_not_found(storage):
    with pytest.raises(NotFound, match="run-404"):
        storage.runs.get("run-404")


def test_a_run_id_is_used_once(storage):
    create_run(storage)
    with pytest.raises(AlreadyExists):
        create_run(storage)


def test_transition_wins_only_from_the_expected_status(storage):
    create_run(storage)
    assert storage.runs.transition("run-1", "running", "paused", step=2)
    assert not storage.runs.transition("run-1", "running", "paused")
    assert storage.runs.transition("run-1", "paused", "resuming")
    assert not storage.runs.transition("run-1", "paused", "resuming")  # the second click
    run = storage.runs.get("run-1")
    assert (run.status, run.step) == ("resuming", 2)


def test_transition_accepts_several_source_statuses(storage):
    create_run(storage, status="paused")
    assert storage.runs.transition("run-1", ("running", "paused", "resuming"), "failed", error="tool set changed")
    run = storage.runs.get("run-1")
    assert (run.status, run.error) == ("failed", "tool set changed")


def test_transition_can_store_the_snapshot_with_the_pause(storage):
    create_run(storage)
    assert storage.runs.transition("run-1", "running", "paused", snapshot_json=json.dumps(SNAPSHOT))
    assert storage.runs.snapshot("run-1") == SNAPSHOT


def test_a_terminal_run_never_moves_again(storage):
    create_run(storage, status="finished")
    with pytest.raises(ValueError, match="terminal"):
        storage.runs.transition("run-1", "finished", "running")


def test_transition_rejects_unknown_statuses_and_fields(storage):
    create_run(storage)
    with pytest.raises(ValueError, match="unknown run status"):
        storage.runs.transition("run-1", "running", "sleeping")
    with pytest.raises(ValueError, match="requester"):
        storage.runs.transition("run-1", "running", "paused", requester="U_EVE")
    assert storage.runs.get("run-1").status == "running"


def test_transition_of_an_unknown_run_is_not_found(storage):
    with pytest.raises(NotFound):
        storage.runs.transition("run-404", "paused", "resuming")


def test_a_snapshot_round_trips(storage):
    create_run(storage)
    storage.runs.save_snapshot("run-1", json.dumps(SNAPSHOT))
    assert storage.runs.snapshot("run-1") == SNAPSHOT
    assert storage.runs.get("run-1").has_snapshot
    storage.runs.save_snapshot("run-1", {**SNAPSHOT, "step": 2})  # a dict is accepted too
    assert storage.runs.snapshot("run-1")["step"] == 2


def test_an_invalid_snapshot_is_refused_before_it_is_stored(storage):
    create_run(storage)
    with pytest.raises(ValueError, match="run-1"):
        storage.runs.save_snapshot("run-1", '{"messages": [')
    with pytest.raises(NotFound, match="no snapshot"):
        storage.runs.snapshot("run-1")


def test_a_corrupt_stored_snapshot_names_the_run(storage):
    create_run(storage)
    storage.db.execute("UPDATE runs SET snapshot_json = '{\"messages\": [' WHERE run_id = 'run-1'")
    with pytest.raises(CorruptRecord, match="run-1") as caught:
        storage.runs.snapshot("run-1")
    assert (caught.value.kind, caught.value.record_id) == ("run", "run-1")
    assert storage.runs.get("run-1").status == "running"  # the rest of the record still reads


def test_the_active_run_of_a_thread(storage):
    assert storage.runs.active_for_thread(THREAD) is None
    create_run(storage, "run-1", status="finished")
    create_run(storage, "run-2", status="paused")
    create_run(storage, "run-other", thread="slack:T1:C9:1.1")
    assert storage.runs.active_for_thread(THREAD).run_id == "run-2"
    storage.runs.transition("run-2", "paused", "expired")
    assert storage.runs.active_for_thread(THREAD) is None


def test_runs_listed_by_status_oldest_first(storage):
    create_run(storage, "run-1", status="paused")
    create_run(storage, "run-2", status="resuming", thread="slack:T1:C1:1700000000.000200")
    create_run(storage, "run-3", status="finished")
    assert [r.run_id for r in storage.runs.list_by_status("paused", "resuming")] == ["run-1", "run-2"]
    assert storage.runs.list_by_status("failed") == []
