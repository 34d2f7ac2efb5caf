"""The audit key and the pruning anchors on both backends.

Without the key, whoever can write the database can recompute every hash: the chain then only shows careless
tampering, and an anchor is trusted only while audit retention is on. With the key (kept outside the database),
every entry, every anchor and the head are signed, so a rewrite, a forged anchor or a cut-off tail is found.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from storage import Batch, stores
from storage.audit_chain import GENESIS, AuditHead, entry_hash
from tests.fakes.storage_data import NOW

KEY = b"a key the attacker does not have"


async def _five(storage) -> None:
    for n in range(5):
        await storage.audit.append(f"U{n}", "approved", f"a-{n}", {"n": n}, now=NOW + timedelta(days=n))


async def _drop_guards(backend) -> None:
    """Remove the append-only triggers, as someone with write access to the database can."""
    if backend.name == "sqlite":
        for trigger in ("audit_no_update", "audit_no_delete"):
            await backend.execute(f"DROP TRIGGER {trigger}")
    else:
        await backend.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_update")
        await backend.execute("ALTER TABLE audit DISABLE TRIGGER audit_no_delete")


async def _forge_anchor(backend) -> None:
    """The forgery of issue 27: an anchor at the next-to-last entry, then every older entry deleted."""
    await backend.execute(
        "INSERT INTO audit_anchor (pruned_through, anchor_hash, pruned_at) "
        f"SELECT id, hash, {'0' if backend.name == 'sqlite' else 'now()'} FROM audit "
        "WHERE id = (SELECT MAX(id) - 1 FROM audit)"
    )
    await backend.execute("DELETE FROM audit WHERE id < (SELECT MAX(id) FROM audit)")


async def _rewrite(backend, entry_id: int) -> None:
    """Edit one entry and recompute every hash and the head, so that the unkeyed chain verifies again."""
    await _drop_guards(backend)
    await backend.execute(f"UPDATE audit SET actor = 'U_EVE' WHERE id = {entry_id}")
    if backend.name == "postgres":
        await backend.execute(
            "DO $$ DECLARE prev text := ''; e record; last bigint := 0; BEGIN "
            "FOR e IN SELECT * FROM audit ORDER BY id LOOP "
            "UPDATE audit SET prev_hash = prev, hash = audit_entry_hash(prev, e.id, e.at, e.actor, e.action, "
            "e.subject, e.details_json::text) WHERE id = e.id RETURNING hash INTO prev; last := e.id; END LOOP; "
            "UPDATE audit_head SET last_id = last, last_hash = prev; END $$"
        )
        return

    def run() -> None:
        with backend.storage.storage.connector.writing() as db:
            prev, last = GENESIS, 0
            rows = db.execute("SELECT id, at, actor, action, subject, details_json FROM audit ORDER BY id").fetchall()
            for row_id, at, actor, action, subject, details in rows:
                digest = entry_hash(prev, row_id, repr(float(at)), actor, action, subject, details)
                db.execute("UPDATE audit SET prev_hash = ?, hash = ? WHERE id = ?", [prev, digest, row_id])
                prev, last = digest, row_id
            db.execute("UPDATE audit_head SET last_id = ?, last_hash = ?", [last, prev])

    await asyncio.to_thread(run)


async def _keyed(backend) -> Any:
    return await backend.open_another(audit_key=KEY)


async def test_a_forged_anchor_fails_while_audit_retention_is_off(backend):
    await _five(backend.storage)
    await _forge_anchor(backend)
    result = await backend.storage.audit.verify(prunes_allowed=False)
    assert not result.ok
    assert result.problems[0].startswith("a pruning anchor at entry 4 exists, but audit retention is off")


async def test_with_the_key_an_unsigned_anchor_fails_even_with_retention_on(backend):
    keyed = await _keyed(backend)
    await _five(keyed)
    assert (await keyed.audit.verify()).ok
    await _forge_anchor(backend)
    result = await keyed.audit.verify(prunes_allowed=True)
    assert result.problems == ("the pruning anchor at entry 4 is not signed with the audit key",)


async def test_with_the_key_prune_signs_its_anchor(backend):
    keyed = await _keyed(backend)
    await _five(keyed)
    assert await keyed.audit.prune(older_than=NOW + timedelta(days=2, hours=1)) == 3
    result = await keyed.audit.verify(prunes_allowed=True)
    assert result.ok, result.problems
    assert (result.checked, result.pruned_through) == (2, 3)


async def test_a_rewritten_and_rehashed_log_passes_without_the_key_and_fails_with_it(backend):
    keyed = await _keyed(backend)
    await _five(keyed)
    await _rewrite(backend, 2)
    assert (await backend.storage.audit.verify()).ok  # what the chain alone cannot show
    result = await keyed.audit.verify()
    assert result.problems == (
        "4 entries are not signed with the audit key (first: 2): written without the key, or forged",
        "the chain's head (entry 5) is not signed with the audit key (the newest entries were cut off?)",
    )


async def test_with_the_key_a_cut_off_tail_with_a_moved_head_is_found(backend):
    keyed = await _keyed(backend)
    await _five(keyed)
    await _drop_guards(backend)
    await backend.execute("DELETE FROM audit WHERE id >= 4")
    await backend.execute("UPDATE audit_head SET last_id = 3, last_hash = (SELECT hash FROM audit WHERE id = 3)")
    assert (await backend.storage.audit.verify()).ok
    assert (await keyed.audit.verify()).problems == (
        "the chain's head (entry 3) is not signed with the audit key (the newest entries were cut off?)",
    )


async def test_entries_appended_in_one_call_and_in_a_batch_are_signed(backend):
    keyed = await _keyed(backend)
    await keyed.audit.append_many([("U1", "a", "s1", {}), ("U2", "b", "s2", {"x": 1})], now=NOW)
    batch = Batch()
    batch.write(stores.audit.append, "U3", "c", "s3", {})
    await keyed.batches.apply(batch)
    result = await keyed.audit.verify()
    assert result.ok, result.problems
    assert result.checked == 3
    unkeyed = backend.storage
    await unkeyed.audit.append("U4", "d", "s4", {})  # a process without the key
    assert "1 entries are not signed with the audit key (first: 4)" in (await keyed.audit.verify()).problems[0]


async def test_a_checkpoint_catches_a_rewrite_before_it(backend):
    storage = backend.storage
    await _five(storage)
    checkpoint = await storage.audit.head()
    assert (checkpoint.entry_id, len(checkpoint.hash), checkpoint.signature) == (5, 64, None)
    assert AuditHead.parse(checkpoint.text()) == checkpoint
    await storage.audit.append("U9", "approved", "a-9", {})
    assert (await storage.audit.verify(against=checkpoint)).ok
    await _rewrite(backend, 3)
    assert (await storage.audit.verify()).ok
    assert (await storage.audit.verify(against=checkpoint)).problems == (
        "entry 5 differs from the checkpoint (the log was rewritten)",
    )
    cut = AuditHead(9, checkpoint.hash)
    assert (await storage.audit.verify(against=cut)).problems == (
        "the checkpoint's entry 9 is newer than the last entry 6 (entries were cut off)",
    )


async def test_with_the_key_the_head_carries_its_entrys_signature(backend):
    keyed = await _keyed(backend)
    await _five(keyed)
    head = await keyed.audit.head()
    assert head.signature is not None and len(head.signature) == 64
    assert (await keyed.audit.verify(against=AuditHead.parse(head.text()))).ok


async def test_recent_keeps_one_workspaces_entries(storage):
    from tests.fakes.storage_contract import create_run
    from tests.fakes.storage_data import new_approval

    await create_run(storage, "run-t1", thread="slack:T1:C1:1")
    await create_run(storage, "run-t2", thread="slack:T2:C1:1")
    [mine] = await storage.approvals.create_many([new_approval("run-t1", "call-1", chat_history_id="slack:T1:C1:1")])
    await storage.audit.append("U1", "paused", "run-t1", {})
    await storage.audit.append("U1", "approved", mine.approval_id, {})
    await storage.audit.append("U2", "paused", "run-t2", {})
    await storage.audit.append("U3", "quorum", "workspace:slack:T1/delete_file", {})
    await storage.audit.append("U3", "policy set", "channel:slack:T1:C1/delete_file", {})
    await storage.audit.append("U4", "quorum", "workspace:slack:T10/delete_file", {})
    await storage.audit.append("U4", "paused", "run-unknown", {})
    await storage.audit.append("U5", "dm", "workspace:slack:T1", {})
    await storage.audit.append("U5", "dm", "workspace:slack:T10", {})
    # A refused change names no place in its subject (the tool someone typed): its details name the workspace.
    await storage.audit.append("U6", "policy change refused", "delete_file", {"workspace": "slack:T1"})
    await storage.audit.append("U7", "policy change refused", "delete_file", {"workspace": "slack:T10"})
    entries = await storage.audit.recent(20, workspace="slack:T1")
    assert [e.actor for e in entries] == ["U6", "U5", "U3", "U3", "U1", "U1"]
    assert [e.actor for e in await storage.audit.recent(20, workspace="slack:T2")] == ["U2"]
    assert len(await storage.audit.recent(20)) == 11


async def test_a_log_written_before_the_key_is_signed_once_and_then_verifies(backend):
    await _five(backend.storage)  # no key yet
    assert await backend.storage.audit.prune(older_than=NOW + timedelta(hours=1)) == 1
    keyed = await _keyed(backend)
    problems = (await keyed.audit.verify()).problems
    assert problems and all("not signed with the audit key" in p for p in problems), problems
    assert await keyed.audit.sign_unsigned() == 5  # four entries and the anchor
    result = await keyed.audit.verify()
    assert result.ok, result.problems
    assert await keyed.audit.sign_unsigned() == 0
    await keyed.audit.append("U9", "approved", "a-9", {})
    assert (await keyed.audit.verify()).ok


async def test_two_keyed_writers_appending_at_once_leave_a_signed_chain_and_head(backend):
    first, second = await _keyed(backend), await _keyed(backend)

    async def write(storage, who: str) -> None:
        for n in range(15):
            if n % 3:
                await storage.audit.append(who, "approved", f"a-{n}", {})
            else:
                await storage.audit.append_many([(who, "expired", f"e-{n}", {}), (who, "expired", f"f-{n}", {})])

    await asyncio.gather(write(first, "U1"), write(second, "U2"))
    result = await first.audit.verify()
    assert result.ok, result.problems
    assert result.checked == 40
