"""Per-tool settings on both backends: set, replace, remove, list, and the check a batch makes."""

from __future__ import annotations

from storage.batch import Batch, stores


async def test_a_setting_is_set_replaced_listed_and_removed(storage):
    settings = storage.tool_settings
    assert await settings.values("justification") == {}
    assert await settings.is_not("deploy", "justification", "required")

    await settings.set_value("deploy", "justification", "required", updated_by="U_ADMIN")
    await settings.set_value("restart", "justification", "off", updated_by="U_ADMIN")
    await settings.set_value("restart", "justification", "required", updated_by="U_ADMIN")
    await settings.set_value("deploy", "other", "x", updated_by="U_ADMIN")

    assert await settings.values("justification") == {"deploy": "required", "restart": "required"}
    assert not await settings.is_not("deploy", "justification", "required")
    await settings.set_value("deploy", "justification", None, updated_by="U_ADMIN")
    assert await settings.values("justification") == {"restart": "required"}
    assert await settings.is_not("deploy", "justification", "required")


async def test_a_batch_refused_by_the_check_writes_nothing(storage):
    await storage.tool_settings.set_value("deploy", "justification", "required", updated_by="U_ADMIN")
    batch = Batch()
    check = batch.require(stores.tool_settings.is_not, "deploy", "justification", "required")
    batch.write(stores.tool_settings.set_value, "deploy", "written", "yes", updated_by="U1")

    outcome = await storage.batches.apply(batch)

    assert not outcome.applied and outcome.refused_by is check
    assert await storage.tool_settings.values("written") == {}
