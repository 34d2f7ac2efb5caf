"""The tool execution ledger, the audit log, event dedupe and conversation references."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import NotFound, StorageError
from tests.fakes.storage_data import NOW

UNKNOWN = "outcome unknown: the bot stopped while this tool was running"


def test_a_tool_call_begins_once(storage):
    assert storage.ledger.begin("call_1", "d1", run_id="run-1", tool_name="delete_file")
    assert not storage.ledger.begin("call_1", "d1", run_id="run-1", tool_name="delete_file")
    entry = storage.ledger.get("call_1")
    assert (entry.status, entry.args_digest) == ("executing", "d1")
    assert (entry.run_id, entry.tool_name) == ("run-1", "delete_file")
    assert entry.finished_at is None


def test_finishing_records_the_outcome_once(storage):
    storage.ledger.begin("call_ok", "d1")
    storage.ledger.begin("call_err", "d2")
    assert storage.ledger.finish("call_ok", ok=True, result="deleted")
    assert storage.ledger.finish("call_err", ok=False, result="permission denied")
    assert not storage.ledger.finish("call_ok", ok=False, result="second report")
    assert (storage.ledger.get("call_ok").status, storage.ledger.get("call_ok").result) == ("done", "deleted")
    assert storage.ledger.get("call_err").status == "failed"
    assert not storage.ledger.begin("call_ok", "d1")  # finished calls never run again


def test_entries_left_executing_are_found_and_marked_unknown(storage):
    storage.ledger.begin("call_1", "d1", run_id="run-1")
    storage.ledger.begin("call_2", "d2", run_id="run-2")
    storage.ledger.begin("call_3", "d3", run_id="run-1")
    storage.ledger.finish("call_3", ok=True, result="ok")
    assert [e.tool_call_id for e in storage.ledger.executing()] == ["call_1", "call_2"]
    assert [e.tool_call_id for e in storage.ledger.executing(run_id="run-1")] == ["call_1"]
    assert storage.ledger.mark_unknown("call_1", UNKNOWN)
    entry = storage.ledger.get("call_1")
    assert (entry.status, entry.result) == ("failed", UNKNOWN)
    assert not storage.ledger.mark_unknown("call_3", UNKNOWN)  # a finished call keeps its result
    assert storage.ledger.get("call_3").result == "ok"


def test_the_ledger_knows_nothing_of_calls_that_never_began(storage):
    assert storage.ledger.get("call_x") is None
    with pytest.raises(NotFound):
        storage.ledger.finish("call_x", ok=True, result="?")


def test_audit_entries_read_back_newest_first_and_filter(storage):
    storage.audit.append("U_BOB", "approval.approved", "appr-1", {"tool": "delete_file"}, now=NOW)
    storage.audit.append("U_ADMIN", "policy.set", "global/*", {"mode": "always"}, now=NOW)
    storage.audit.append("U_BOB", "approval.rejected", "appr-2", {"feedback": "no"}, now=NOW)
    assert [e.action for e in storage.audit.recent()] == ["approval.rejected", "policy.set", "approval.approved"]
    assert [e.subject for e in storage.audit.recent(actor="U_BOB")] == ["appr-2", "appr-1"]
    [entry] = storage.audit.recent(subject="appr-1")
    assert (entry.actor, entry.details, entry.at) == ("U_BOB", {"tool": "delete_file"}, NOW)
    assert len(storage.audit.recent(n=1)) == 1


def test_the_audit_log_is_append_only(storage):
    storage.audit.append("U_BOB", "approval.approved", "appr-1", {})
    with pytest.raises(StorageError, match="append-only"), storage.connector.writing() as db:
        db.execute("UPDATE audit SET actor = 'U_EVE'")
    with pytest.raises(StorageError, match="append-only"), storage.connector.writing() as db:
        db.execute("DELETE FROM audit")
    assert storage.audit.recent()[0].actor == "U_BOB"


def test_an_event_is_handled_the_first_time_only(storage):
    assert storage.events.first_time("slack:Ev1")
    assert not storage.events.first_time("slack:Ev1")
    assert storage.events.first_time("slack:Ev2")


def test_pruning_forgets_only_old_event_keys(storage):
    storage.events.first_time("old", now=NOW - timedelta(days=2))
    storage.events.first_time("new", now=NOW)
    assert storage.events.prune(older_than_seconds=24 * 3600, now=NOW) == 1
    assert storage.events.first_time("old", now=NOW)
    assert not storage.events.first_time("new", now=NOW)


def test_conversation_references_are_saved_and_replaced(storage):
    key = "teams:19:abc@thread.tacv2"
    assert storage.conversations.load(key) is None
    storage.conversations.save(key, {"serviceUrl": "https://smba.example/", "conversation": {"id": "19:abc"}})
    storage.conversations.save(key, {"serviceUrl": "https://smba2.example/"})
    assert storage.conversations.load(key) == {"serviceUrl": "https://smba2.example/"}
