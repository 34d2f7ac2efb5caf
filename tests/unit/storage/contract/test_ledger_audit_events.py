"""The tool execution ledger, the append-only audit log, event dedupe and conversations on both backends."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest

from storage import (
    ApprovalStore,
    AuditLog,
    ChatMessageStore,
    ConversationStore,
    EventDedupe,
    NotFound,
    PolicyStore,
    RunStore,
    StorageError,
    ToolLedger,
)
from storage.protocols import ApprovalPlaces, Outbox, RunLeases, ThreadInbox
from tests.fakes.storage_data import NOW

UNKNOWN = "outcome unknown: the bot stopped while this tool was running"


async def test_a_tool_call_begins_once_and_finishes_once(storage):
    assert await storage.ledger.begin("call_ok", "d1", run_id="run-1", tool_name="delete_file")
    assert not await storage.ledger.begin("call_ok", "d1", run_id="run-1", tool_name="delete_file")
    entry = await storage.ledger.get("call_ok")
    assert (entry.status, entry.args_digest) == ("executing", "d1")
    assert (entry.run_id, entry.tool_name) == ("run-1", "delete_file")
    assert entry.finished_at is None
    assert await storage.ledger.finish("call_ok", ok=True, result="deleted \u0000 a.txt")
    assert not await storage.ledger.finish("call_ok", ok=False, result="second report")
    done = await storage.ledger.get("call_ok")
    assert (done.status, done.result) == ("done", "deleted \u0000 a.txt")
    assert done.finished_at >= done.started_at
    assert not await storage.ledger.begin("call_ok", "d1")  # finished calls never run again


async def test_entries_left_executing_are_found_and_marked_unknown(storage):
    await storage.ledger.begin("call_1", "d1", run_id="run-1")
    await storage.ledger.begin("call_2", "d2", run_id="run-2")
    await storage.ledger.begin("call_3", "d3", run_id="run-1")
    await storage.ledger.finish("call_3", ok=True, result="ok")
    assert [e.tool_call_id for e in await storage.ledger.executing()] == ["call_1", "call_2"]
    assert [e.tool_call_id for e in await storage.ledger.executing(run_id="run-1")] == ["call_1"]
    assert await storage.ledger.mark_unknown("call_1", UNKNOWN)
    entry = await storage.ledger.get("call_1")
    assert (entry.status, entry.result) == ("failed", UNKNOWN)
    assert not await storage.ledger.mark_unknown("call_3", UNKNOWN)  # a finished call keeps its result
    assert (await storage.ledger.get("call_3")).result == "ok"


async def test_the_ledger_knows_nothing_of_calls_that_never_began(storage):
    assert await storage.ledger.get("call_x") is None
    with pytest.raises(NotFound):
        await storage.ledger.finish("call_x", ok=True, result="?")


async def test_audit_entries_read_back_newest_first_and_filter(storage):
    first = await storage.audit.append("U_BOB", "approval.approved", "appr-1", {"tool": "delete_file"}, now=NOW)
    await storage.audit.append("U_ADMIN", "policy.set", "global/*", {"mode": "always"}, now=NOW)
    last = await storage.audit.append("U_BOB", "approval.rejected", "appr-2", {"feedback": "no"}, now=NOW)
    assert last > first
    assert [e.action for e in await storage.audit.recent()] == ["approval.rejected", "policy.set", "approval.approved"]
    assert [e.subject for e in await storage.audit.recent(actor="U_BOB")] == ["appr-2", "appr-1"]
    [entry] = await storage.audit.recent(subject="appr-1")
    assert (entry.id, entry.actor, entry.details, entry.at) == (first, "U_BOB", {"tool": "delete_file"}, NOW)
    assert len(await storage.audit.recent(n=1)) == 1


async def test_the_database_refuses_to_change_the_audit_log(backend):
    await backend.storage.audit.append("U_BOB", "approval.approved", "appr-1", {})
    for statement in ("UPDATE audit SET actor = 'U_EVE'", "DELETE FROM audit"):
        with pytest.raises(StorageError, match="append-only"):
            await backend.execute(statement)
    assert [e.actor for e in await backend.storage.audit.recent()] == ["U_BOB"]


async def test_an_event_is_handled_the_first_time_only(storage):
    assert await storage.events.first_time("slack:Ev1")
    assert not await storage.events.first_time("slack:Ev1")
    assert await storage.events.first_time("slack:Ev2")


async def test_pruning_forgets_only_old_event_keys(storage):
    await storage.events.first_time("old", now=NOW - timedelta(days=2))
    await storage.events.first_time("new", now=NOW)
    assert await storage.events.prune(older_than_seconds=24 * 3600, now=NOW) == 1
    assert await storage.events.first_time("old", now=NOW)
    assert not await storage.events.first_time("new", now=NOW)


async def test_conversation_references_are_saved_and_replaced(storage):
    key = "teams:19:abc@thread.tacv2"
    assert await storage.conversations.load(key) is None
    await storage.conversations.save(key, {"serviceUrl": "https://smba.example/", "conversation": {"id": "19:abc"}})
    await storage.conversations.save(key, {"serviceUrl": "https://smba2.example/"})
    assert await storage.conversations.load(key) == {"serviceUrl": "https://smba2.example/"}


async def test_naive_times_are_refused(storage):
    with pytest.raises(ValueError, match="timezone-aware"):
        await storage.events.first_time("slack:Ev9", now=NOW.replace(tzinfo=None))


async def test_every_protocol_method_is_awaitable_on_every_store(backend):
    stores = {
        "messages": ChatMessageStore,
        "runs": RunStore,
        "approvals": ApprovalStore,
        "ledger": ToolLedger,
        "policies": PolicyStore,
        "audit": AuditLog,
        "events": EventDedupe,
        "conversations": ConversationStore,
        "places": ApprovalPlaces,
        "leases": RunLeases,
        "inbox": ThreadInbox,
        "outbox": Outbox,
    }
    for attribute, protocol in stores.items():
        store = getattr(backend.storage, attribute)
        for name in (n for n in vars(protocol) if not n.startswith("_")):
            assert inspect.iscoroutinefunction(getattr(store, name)), f"{backend.name}: {attribute}.{name}"
    assert backend.storage.messages.last_k == 10
