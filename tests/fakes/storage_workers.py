"""Contenders for the storage concurrency tests, importable by ``spawn`` child processes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from bot.messages import ChatMessage
from storage import Batch, Storage, open_storage, stores
from tests.fakes.storage_data import NOW

RACES = ("decide", "transition", "begin", "limited")
"""``limited``: a rate-limited append (issue 31's break-glass limit of 1: ``audit.fewer_than`` then the append)."""


def attempt(storage: Storage, race: str, target: str, contender: str) -> bool:
    """One compare-and-set attempt of the given kind; ``True`` if this contender won."""
    if race == "decide":
        return storage.approvals.decide(target, status="approved", decided_by=contender, now=NOW)
    if race == "transition":
        return storage.runs.transition(target, "paused", "resuming", error=contender)
    if race == "begin":
        return storage.ledger.begin(target, "digest", tool_name=contender)
    if race == "limited":
        batch = Batch()
        batch.require(stores.audit.fewer_than, 1, target, "break-glass", NOW - timedelta(days=1))
        batch.write(stores.audit.append, target, "break-glass", contender, {}, now=NOW)
        return storage.batches.apply(batch).applied
    raise ValueError(race)


def in_threads(work: Callable[[str], Any], names: list[str], before_start: Callable[[], Any] | None = None) -> dict:
    """Run ``work(name)`` in one thread per name, all released at once; return results and errors."""
    gate = threading.Barrier(len(names) + 1)
    results: dict[str, Any] = {}
    errors: list[str] = []

    def run(name: str) -> None:
        gate.wait()
        try:
            results[name] = work(name)
        except BaseException as exc:  # reported to the test, which fails on any error
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    if before_start is not None:
        before_start()
    gate.wait()
    for thread in threads:
        thread.join()
    return {"results": results, "errors": errors}


def race_process(path: str, races: list[tuple[str, str]], prefix: str, n_threads: int, processes_ready, queue) -> None:
    """In a child process: for each (race, target), ``n_threads`` threads contend; report the winners."""
    report: dict[str, Any] = {"prefix": prefix, "winners": {}, "errors": []}
    try:
        storage = open_storage(path)
        try:
            for race, target in races:
                outcome = in_threads(
                    lambda name, race=race, target=target: attempt(storage, race, target, name),
                    [f"{prefix}-{i}" for i in range(n_threads)],
                    before_start=processes_ready.wait,
                )
                report["winners"][race] = sorted(name for name, won in outcome["results"].items() if won)
                report["errors"] += outcome["errors"]
        finally:
            storage.close()
    except BaseException as exc:
        report["errors"].append(repr(exc))
    queue.put(report)


def writer_process(path: str, prefix: str, n_threads: int, rounds: int, processes_ready, queue) -> None:
    """In a child process: ``n_threads`` concurrent writers each do ``rounds`` rounds of mixed writes."""
    report: dict[str, Any] = {"prefix": prefix, "errors": [], "rounds": 0}
    try:
        storage = open_storage(path)

        def write(name: str) -> int:
            thread = f"slack:T1:C1:{name}"
            for i in range(rounds):
                storage.messages.write_messages(thread, [ChatMessage.from_user(f"{name} says {i}")])
                storage.audit.append(name, "test.write", thread, {"round": i})
                storage.events.first_time(f"{name}:{i}")
                storage.runs.create(
                    f"{name}-run-{i}",
                    chat_history_id=thread,
                    platform="slack",
                    workspace="T1",
                    channel="C1",
                    thread=name,
                    requester=name,
                )
                storage.runs.transition(f"{name}-run-{i}", "running", "finished")
                storage.messages.retrieve_messages(thread, last_k=5)
            return rounds

        try:
            outcome = in_threads(write, [f"{prefix}-{i}" for i in range(n_threads)], before_start=processes_ready.wait)
            report["rounds"] = sum(outcome["results"].values())
            report["errors"] = outcome["errors"]
        finally:
            storage.close()
    except BaseException as exc:
        report["errors"].append(repr(exc))
    queue.put(report)


def open_process(path: str, processes_ready, queue) -> None:
    """In a child process: open (and so create and migrate) the file at the same moment as the others."""
    report: dict[str, Any] = {"errors": [], "version": None}
    try:
        processes_ready.wait()
        with open_storage(path) as storage:
            report["version"] = storage.schema_version()
            storage.events.first_time("opened")
    except BaseException as exc:
        report["errors"].append(repr(exc))
    queue.put(report)
