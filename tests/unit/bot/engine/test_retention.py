"""Retention while serving: the sweep drops old snapshots and prunes old work, never what is still in use."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.config import Config, ConfigError
from bot.engine.model import DecisionRequest
from tests.fakes.engine_kit import REQUESTER, Clock, Harness, asks_for, says


async def test_the_sweep_drops_old_snapshots_and_prunes_ended_runs_but_not_a_paused_one(tmp_path):
    clock = Clock(datetime.now(UTC))  # stores stamp some rows with the real time: keep the engine's close to it
    h = await Harness.open(
        tmp_path,
        clock=clock,
        replies=[asks_for("delete_file", path="a.txt"), says("Done.")],
        default_ttl_seconds=30 * 86400,
        retention_seconds=2 * 86400,
    )
    try:
        # A finished run that had paused (so it has a snapshot), in one thread ...
        [approval] = await h.paused_approvals("delete a.txt", thread="1.1")
        await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
        await h.engine.wait_idle()
        finished = approval.run_id
        assert (await h.run_of(finished)).has_snapshot
        # ... and a run paused on a pending approval in another.
        h.generator.replies.append(asks_for("delete_file", path="b.txt"))
        [pending] = await h.paused_approvals("delete b.txt", thread="2.2")

        clock.advance(days=1)
        await h.engine.lifecycle.sweep()  # one day on: nothing is old enough
        assert (await h.run_of(finished)).has_snapshot

        clock.advance(days=7)  # eight days on; the next pass is more than an hour later
        await h.engine.lifecycle.sweep()
        runs = {r.run_id: r for r in await h.engine.storage.runs.list_by_status("finished", "paused")}
        assert finished not in runs  # pruned after two days, snapshot and all
        assert runs[pending.run_id].status == "paused" and runs[pending.run_id].has_snapshot
        assert [a.approval_id for a in await h.engine.storage.approvals.pending()] == [pending.approval_id]
        assert await h.history(h.thread("2.2"))
    finally:
        await h.close()


def test_retention_settings_are_read_and_bad_values_refused_at_start():
    def read(**env: str) -> Config:
        return Config.from_env(env, dotenv_path=None)

    default = read()
    assert (default.snapshot_retention_seconds, default.retention_seconds, default.audit_retention_seconds) == (
        7 * 86400,
        None,
        None,
    )
    assert read(COUNTERSIGN_SNAPSHOT_RETENTION="36h").snapshot_retention_seconds == 36 * 3600
    assert read(COUNTERSIGN_SNAPSHOT_RETENTION="never").snapshot_retention_seconds is None
    assert read(COUNTERSIGN_RETENTION_DAYS="90").retention_seconds == 90 * 86400
    assert read(COUNTERSIGN_AUDIT_RETENTION_DAYS="400").audit_retention_seconds == 400 * 86400
    for name, raw in [
        ("COUNTERSIGN_SNAPSHOT_RETENTION", "a week"),
        ("COUNTERSIGN_RETENTION_DAYS", "-1"),
        ("COUNTERSIGN_AUDIT_RETENTION_DAYS", "forever"),
    ]:
        with pytest.raises(ConfigError, match=name):
            read(**{name: raw})


async def test_the_sweep_posts_the_audit_head_to_the_audit_channel_once_a_day(tmp_path):
    from bot.engine.model import AdminRequest, ThreadRef
    from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, WORKSPACE

    # Morning of today, so two hours later is still the same day whenever the test runs.
    clock = Clock(datetime.now(UTC).replace(hour=9, minute=0))
    h = await Harness.open(tmp_path, clock=clock, audit_channel=f"{PLATFORM}:{WORKSPACE}:C_AUDIT")
    try:
        await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "quorum delete_file 2"))
        await h.engine.lifecycle.sweep()
        where = ThreadRef(PLATFORM, WORKSPACE, "C_AUDIT", "")
        head = await h.engine.storage.audit.head()
        [posted] = h.surface.replies_in(where)
        assert f"countersign audit verify --against {head.text()}" in posted
        clock.advance(hours=2)
        await h.engine.lifecycle.sweep()  # the same day: not again
        assert len(h.surface.replies_in(where)) == 1
        clock.advance(days=1)
        await h.engine.lifecycle.sweep()
        assert len(h.surface.replies_in(where)) == 2
    finally:
        await h.close()


async def test_with_the_audit_key_the_engine_signs_entries_and_the_sweeps_prune_signs_its_anchor(tmp_path):
    from bot.engine.model import AdminRequest
    from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, WORKSPACE

    clock = Clock(datetime.now(UTC))
    key = b"the engine's audit key, from the environment"
    h = await Harness.open(tmp_path, clock=clock, audit_key=key, audit_retention_seconds=86400)
    try:
        for n in (2, 3):
            await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, f"quorum delete_file {n}"))
        clock.advance(days=2)
        await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "quorum delete_file 4"))
        await h.engine.lifecycle.sweep()
        result = await h.engine.storage.audit.verify(prunes_allowed=True)
        assert result.ok, result.problems
        assert (result.pruned_through, result.checked) == (2, 1)
        assert (await h.engine.storage.audit.head()).signature is not None
    finally:
        await h.close()
