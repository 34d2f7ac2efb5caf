"""The audit log's hash chain on both backends: intact chains verify; edits, deletions and a cut tail are found;
pruning past the audit retention keeps the chain verifiable from the first entry that remains."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage import StorageError
from tests.fakes.storage_data import NOW


async def _five(storage) -> None:
    await storage.audit.append("U_ANA", "paused", "run-1", {"approvals": ["a-1"]}, now=NOW)
    await storage.audit.append("U_BOB", "approved", "a-1", {"tool": "delete_file", "émoji": "✓"}, now=NOW)
    await storage.audit.append_many(
        [("countersign", "expired", "a-2", {"tool": "scale"}), ("countersign", "expired", "a-3", {})],
        now=NOW + timedelta(days=10),
    )
    await storage.audit.append("U_ADMIN", "policy set", "delete_file", {"mode": "always"}, now=NOW + timedelta(days=20))


async def _tamper(backend, sql: str, trigger: str) -> None:
    """Change the log behind countersign's back, as someone with write access to the database could."""
    if backend.name == "sqlite":
        await backend.execute(f"DROP TRIGGER {trigger}")
    else:
        await backend.execute(f"ALTER TABLE audit DISABLE TRIGGER {trigger}")
    await backend.execute(sql)


async def test_an_untouched_chain_verifies_and_exports_with_its_hashes(storage):
    assert (await storage.audit.verify()).ok  # empty
    await _five(storage)
    result = await storage.audit.verify()
    assert result.ok, result.problems
    assert (result.checked, result.first_id, result.last_id) == (5, 1, 5)
    entries = await storage.audit.since(NOW + timedelta(days=5))
    assert [e.id for e in entries] == [3, 4, 5]
    assert entries[0].prev_hash == (await storage.audit.since())[1].hash
    assert all(len(e.hash) == 64 for e in entries)


async def test_an_edited_entry_is_found(backend):
    await _five(backend.storage)
    await _tamper(backend, "UPDATE audit SET actor = 'U_EVE' WHERE id = 2", "audit_no_update")
    result = await backend.storage.audit.verify()
    assert not result.ok
    assert result.problems == ("entry 2: its content does not match its hash (edited)",)


async def test_a_deleted_entry_is_found(backend):
    await _five(backend.storage)
    await _tamper(backend, "DELETE FROM audit WHERE id = 3", "audit_no_delete")
    result = await backend.storage.audit.verify()
    assert not result.ok
    assert "entries 3..3 are missing (deleted)" in result.problems
    assert "entry 4: does not follow the entry before it (one was deleted or edited)" in result.problems


async def test_deleting_the_newest_entries_is_found(backend):
    await _five(backend.storage)
    await _tamper(backend, "DELETE FROM audit WHERE id >= 4", "audit_no_delete")
    result = await backend.storage.audit.verify()
    assert result.problems == ("the newest entries after 3 are missing (the chain's head is 5)",)


async def test_pruning_keeps_the_chain_verifiable_and_deletes_nothing_newer(backend):
    storage = backend.storage
    await _five(storage)
    assert await storage.audit.prune(older_than=NOW - timedelta(days=1)) == 0
    assert await storage.audit.prune(older_than=NOW + timedelta(days=15)) == 4
    result = await storage.audit.verify()
    assert result.ok, result.problems
    assert (result.checked, result.first_id, result.pruned_through) == (1, 5, 4)
    await storage.audit.append("U_ANA", "paused", "run-2", {}, now=NOW + timedelta(days=21))
    assert (await storage.audit.verify()).ok
    with pytest.raises(StorageError, match="append-only"):  # still append-only past the anchor
        await backend.execute("DELETE FROM audit WHERE id = 5")
