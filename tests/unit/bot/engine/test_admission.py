"""Admission: at most ``COUNTERSIGN_MAX_ACTIVE_RUNS`` runs work at once per process; messages are still stored at once.

Deterministic: the model waits on the test (a gate) or spins on the event loop until released; nothing here waits
for time to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from bot.config import Config, ConfigError
from bot.engine.admission import Admission
from bot.messages import ChatMessage
from tests.fakes.engine_kit import Harness, Harnesses, ScriptedChatGenerator, bounded, says

BURST = 30


class HeldModel:
    """A model whose calls are held until the test releases them; counts the calls in flight.

    ``spin``: a held call keeps taking turns on the event loop (as a run's steps do), recording each turn.
    """

    def __init__(self, *, spin: bool = False) -> None:
        self.spin = spin
        self.seen: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.released = asyncio.Event()
        self.turns: list[str] = []
        self.changed = asyncio.Condition()

    async def run_async(self, messages, tools=None, generation_kwargs=None, streaming_callback=None):
        text = next(m.text for m in reversed(messages) if m.role == "user")
        async with self.changed:
            self.seen.append(text)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.changed.notify_all()
        try:
            if self.spin:
                while not self.released.is_set():
                    self.turns.append(text)
                    await asyncio.sleep(0)  # one turn of the loop, as a run's step takes
            else:
                await self.released.wait()
        finally:
            self.in_flight -= 1
        return {"replies": [ChatMessage.from_assistant(f"answer to {text}")]}

    async def until(self, condition: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(condition)


async def _settled(admission: Admission, model: HeldModel, expected: int) -> None:
    """Until each of ``expected`` messages is at the model or waiting for a place (checked at every loop turn)."""
    while model.in_flight + admission.waiting < expected:  # noqa: ASYNC110 - the gate has no event: every turn
        await asyncio.sleep(0)


def test_the_limit_defaults_to_40_whatever_the_pool_and_is_a_setting():
    assert Config().active_runs_limit == 40
    assert Config.from_env({"COUNTERSIGN_DB_POOL_SIZE": "5"}, dotenv_path=None).active_runs_limit == 40
    assert Config.from_env({"COUNTERSIGN_MAX_ACTIVE_RUNS": "3"}, dotenv_path=None).active_runs_limit == 3
    with pytest.raises(ConfigError, match="COUNTERSIGN_MAX_ACTIVE_RUNS must be at least 1, got 0"):
        Config.from_env({"COUNTERSIGN_MAX_ACTIVE_RUNS": "0"}, dotenv_path=None)


async def test_more_runs_than_the_limit_never_work_at_once_and_all_finish(tmp_path):
    model = HeldModel()
    harness = await Harness.open(tmp_path, generator=model, max_active_runs=2)
    engine, storage = harness.engine, harness.engine.storage
    admission = engine.parts.work.admission
    try:
        threads = [f"1700000000.{i:06d}" for i in range(6)]
        received = [await engine.receive(harness.inbound(f"m{i}", thread=t)) for i, t in enumerate(threads)]
        # Stored, every one; only the first two started their run in that write (a place each).
        assert all(r is not None for r in received)
        assert [r.started is not None for r in received if r is not None] == [True, True, False, False, False, False]
        processing = [asyncio.create_task(engine.process(r)) for r in received if r is not None]
        await bounded(_settled(admission, model, 6))
        assert (model.in_flight, admission.waiting) == (2, 4)
        # The four waiting are stored as waiting in their inbox, with no run: what the sweep would start.
        for t in threads[2:]:
            assert [i.message_ref for i in await storage.inbox.waiting(harness.thread(t).key)] != []
            assert await storage.runs.active_for_thread(harness.thread(t).key) is None
        model.released.set()
        await bounded(asyncio.gather(*processing))
        await bounded(engine.wait_idle())
        assert model.most_in_flight == 2
        assert sorted(model.seen) == [f"m{i}" for i in range(6)]
        assert model.seen[:2] == ["m0", "m1"] and model.seen[2:] == ["m2", "m3", "m4", "m5"]  # their turn, in order
        assert sorted(r.text for r in harness.surface.replies) == sorted(f"answer to m{i}" for i in range(6))
        assert (admission.active, admission.waiting, admission.most_active) == (0, 0, 2)
    finally:
        await harness.close()


async def test_a_message_is_stored_while_the_engine_is_saturated_without_taking_turns_behind_the_burst(tmp_path):
    """The acknowledgement's storage work shares the loop with the admitted runs only, never with the whole burst."""
    model = HeldModel(spin=True)
    harness = await Harness.open(tmp_path, generator=model, max_active_runs=2)
    engine = harness.engine
    admission = engine.parts.work.admission
    try:
        burst = [asyncio.create_task(harness.say(f"m{i}", thread=f"1700000000.{i:06d}")) for i in range(BURST)]
        await bounded(_settled(admission, model, BURST))
        before = len(model.turns)
        received = await bounded(engine.receive(harness.inbound("late", thread="1800000000.000001")))
        during = model.turns[before:]
        assert during, "the write took at least one turn of the loop"
        # The runs that took turns while the message was stored: the admitted ones, not the burst's 30.
        assert len(set(during)) <= 2
        assert received is not None and received.started is None  # stored, its run waits its turn
        model.released.set()
        await bounded(engine.process(received))
        await bounded(asyncio.gather(*burst))
        await bounded(engine.wait_idle())
        assert len(harness.surface.replies) == BURST + 1
        assert model.most_in_flight == 2
    finally:
        await harness.close()


async def test_a_threads_messages_keep_their_order_while_they_wait_for_a_place(tmp_path):
    model = HeldModel()
    harness = await Harness.open(tmp_path, generator=model, max_active_runs=1)
    engine = harness.engine
    try:
        first = asyncio.create_task(harness.say("a1", thread="1700000000.000001"))
        await bounded(model.until(lambda: model.in_flight == 1))
        other = asyncio.create_task(harness.say("b1", thread="1700000000.000002"))
        second = asyncio.create_task(harness.say("a2", thread="1700000000.000001"))
        await bounded(_settled(engine.parts.work.admission, model, 2))
        model.released.set()
        await bounded(asyncio.gather(first, other, second))
        await bounded(engine.wait_idle())
        assert model.seen.index("a1") < model.seen.index("a2")
        assert model.most_in_flight == 1
        history = [m.text for m in await harness.history(harness.thread("1700000000.000001"))]
        assert history == ["a1", "answer to a1", "a2", "answer to a2"]
    finally:
        await harness.close()


async def test_a_message_waiting_for_a_place_when_its_process_dies_is_started_by_the_next(tmp_path):
    harnesses = Harnesses(tmp_path)
    model = HeldModel()
    first = await harnesses.open(generator=model, max_active_runs=1)
    admission = first.engine.parts.work.admission
    try:
        busy = asyncio.create_task(first.say("busy", thread="1700000000.000001"))
        waiting = asyncio.create_task(first.say("waits", thread="1700000000.000002"))
        await bounded(_settled(admission, model, 2))
        assert admission.waiting == 1
        # The first process hangs from here on, as a dead one: another starts on the same database.
        second = await harnesses.reopen(first, generator=ScriptedChatGenerator([says("taken over")]))
        await bounded(second.engine.wait_idle())
        assert [r.text for r in second.surface.replies] == ["taken over"]
        history = [m.text for m in await second.history(second.thread("1700000000.000002"))]
        assert history == ["waits", "taken over"]
        model.released.set()
        await bounded(asyncio.gather(busy, waiting))
        assert model.seen == ["busy"]  # the waiting message ran once, in the other process
    finally:
        model.released.set()
        await harnesses.aclose()


async def test_places_go_in_order_and_a_cancelled_waiter_passes_its_place_on():
    admission = Admission(1)
    order: list[str] = []

    async def run(name: str) -> None:
        async with admission.admitted(name):
            order.append(name)
            await asyncio.sleep(0)

    await admission.enter()  # the place is taken: everyone below queues
    tasks = [asyncio.create_task(run(n)) for n in "abc"]
    while admission.waiting < 3:  # noqa: ASYNC110 - the gate has no event: every turn
        await asyncio.sleep(0)
    tasks[1].cancel()
    admission.leave()
    await bounded(asyncio.gather(*tasks, return_exceptions=True))
    assert order == ["a", "c"]
    assert (admission.active, admission.waiting) == (0, 0)


async def test_a_run_waiting_for_a_person_gives_its_place_to_another_meanwhile():
    admission = Admission(1)
    answered = asyncio.Event()
    order: list[str] = []

    async def asking() -> None:
        async with admission.admitted("asks"):
            async with admission.aside("asks"):
                await answered.wait()
            order.append("asks resumed")

    async def other() -> None:
        async with admission.admitted("other"):
            order.append("other")
            answered.set()

    await bounded(asyncio.gather(asking(), other()))
    assert order == ["other", "asks resumed"]
    assert admission.active == 0
