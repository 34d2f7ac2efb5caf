"""Concurrency: exactly one winner per compare-and-set, and no "database is locked" under load.

Threads share one Storage (one connection each); processes are started with ``spawn`` and open the
same file, as replicas of the bot would.
"""

from __future__ import annotations

import multiprocessing

import pytest

from storage import LATEST_VERSION, open_storage
from tests.fakes.storage_data import create_run, new_approval
from tests.fakes.storage_workers import (
    RACES,
    attempt,
    in_threads,
    open_process,
    race_process,
    writer_process,
)

DEADLINE = 120  # seconds; a bound for a hung child, not a synchronisation


def prepare_targets(storage) -> dict[str, str]:
    """A paused run with one pending approval; the ledger call has not begun."""
    create_run(storage, "run-1", status="paused")
    [approval] = storage.approvals.create_many([new_approval()])
    return {"decide": approval.approval_id, "transition": "run-1", "begin": "call_1", "limited": "U_ANA"}


def run_children(target, args_per_child: list[tuple]) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(len(args_per_child))
    queue = ctx.Queue()
    children = [ctx.Process(target=target, args=(*args, ready, queue)) for args in args_per_child]
    for child in children:
        child.start()
    try:
        reports = [queue.get(timeout=DEADLINE) for _ in children]
    finally:
        for child in children:
            child.join(timeout=DEADLINE)
    assert [child.exitcode for child in children] == [0] * len(children)
    return reports


@pytest.mark.parametrize("race", RACES)
def test_one_winner_among_100_threads(storage, race):
    target = prepare_targets(storage)[race]
    outcome = in_threads(lambda name: attempt(storage, race, target, name), [f"t{i}" for i in range(100)])
    assert outcome["errors"] == []
    winners = [name for name, won in outcome["results"].items() if won]
    assert len(winners) == 1 and len(outcome["results"]) == 100
    if race == "decide":
        assert storage.approvals.get(target).decided_by == winners[0]
    if race == "transition":
        assert storage.runs.get(target).error == winners[0]
    if race == "begin":
        assert storage.ledger.get(target).tool_name == winners[0]
    if race == "limited":
        assert [e.subject for e in storage.audit.recent(200) if e.action == "break-glass"] == winners


def test_one_winner_among_100_contenders_in_2_processes(storage):
    targets = prepare_targets(storage)
    races = [(race, targets[race]) for race in RACES]
    reports = run_children(race_process, [(storage.path, races, prefix, 50) for prefix in ("p1", "p2")])
    assert [r["errors"] for r in reports] == [[], []]
    for race in RACES:
        winners = [name for report in reports for name in report["winners"][race]]
        assert len(winners) == 1, (race, winners)
    assert storage.approvals.get(targets["decide"]).decided_by == next(
        name for report in reports for name in report["winners"]["decide"]
    )
    assert storage.runs.get("run-1").status == "resuming"
    limited = [e.subject for e in storage.audit.recent(200) if e.action == "break-glass"]
    assert limited == [name for report in reports for name in report["winners"]["limited"]], "one entry, the winner's"


def test_4_processes_of_50_writers_never_see_a_locked_database(storage):
    rounds = 3
    reports = run_children(writer_process, [(storage.path, f"w{p}", 50, rounds) for p in range(4)])
    assert [r["errors"] for r in reports] == [[]] * 4
    assert sum(r["rounds"] for r in reports) == 4 * 50 * rounds
    expected = 4 * 50 * rounds
    assert storage.db["messages"].count == expected
    assert storage.db["audit"].count == expected
    assert len(storage.runs.list_by_status("finished")) == expected


def test_processes_creating_the_same_new_file_at_once_migrate_it_once(tmp_path):
    path = str(tmp_path / "fresh.db")
    reports = run_children(open_process, [(path,)] * 4)
    assert [r["errors"] for r in reports] == [[]] * 4
    assert {r["version"] for r in reports} == {LATEST_VERSION}
    with open_storage(path) as storage:
        versions = [r["version"] for r in storage.db.query("SELECT version FROM schema_version")]
        assert versions == list(range(1, LATEST_VERSION + 1))
        assert storage.db["events"].count == 1
