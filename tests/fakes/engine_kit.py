"""Test data for the engine's end-to-end tests: a controllable clock, recording tools, messages, a harness.

Everything here is real: the harness opens a real :class:`bot.engine.engine.Engine` on a SQLite file
(or on PostgreSQL, given ``database_url=``), with real tools whose executions are recorded and a
:class:`RecordingSurface`.

>>> h = await Harness.open(tmp_path, replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
>>> await h.say("delete a.txt")
>>> approval = h.surface.renders[-1].approvals[0]
>>> await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
>>> await h.engine.wait_idle()
>>> h.tools.executed
[('delete_file', {'path': 'a.txt'})]
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.config import Config
from bot.engine.engine import Engine
from bot.engine.model import ApprovalView, Inbound, ThreadRef
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole, ToolCall, new_id
from bot.tools import Tool, tool
from tests.fakes.recording_surface import RecordingSurface

PLATFORM = "slack"
WORKSPACE = "T1"
CHANNEL = "C1"
REQUESTER = "U_REQ"
ADMIN = "U_ADMIN"
OTHER = "U_OTHER"
START = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves by hand: ``clock()`` is the engine's ``clock``; ``advance`` moves it."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        """Move forward, e.g. ``advance(hours=25)``."""
        self.now += timedelta(**delta)


@dataclass
class RecordingTools:
    """Real tools whose executions land in :attr:`executed` (thread-safe: sync tools run in threads)."""

    executed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, name: str, arguments: dict[str, Any]) -> None:
        """Note one execution."""
        with self._lock:
            self.executed.append((name, dict(arguments)))

    def runs_of(self, name: str) -> list[dict[str, Any]]:
        """The arguments of every execution of ``name``."""
        return [args for tool_name, args in self.executed if tool_name == name]

    def standard(self) -> list[Tool]:
        """``delete_file``, ``scale_service`` (typed parameters for edits), ``read_logs`` (declared never),
        ``set_secret`` (a secret-bearing argument)."""
        tools = self

        @tool
        def delete_file(path: str) -> str:
            """Delete a file in the sandbox.

            :param path: The file to delete.
            """
            tools.record("delete_file", {"path": path})
            return f"deleted {path}"

        @tool
        def scale_service(service: str, replicas: int, dry_run: bool = False, zones: list[str] | None = None) -> str:
            """Scale a service.

            :param service: The service name.
            :param replicas: How many replicas.
            :param dry_run: Only pretend.
            :param zones: Availability zones.
            """
            arguments = {"service": service, "replicas": replicas, "dry_run": dry_run, "zones": zones}
            tools.record("scale_service", arguments)
            return f"{service} scaled to {replicas}"

        @tool(confirmation_default="never")
        def read_logs(service: str) -> str:
            """Read the recent logs of a service (harmless: declared never to need approval).

            :param service: The service name.
            """
            tools.record("read_logs", {"service": service})
            return f"logs of {service}: all quiet"

        @tool
        def set_secret(name: str, api_key: str, note: str = "") -> str:
            """Store a secret.

            :param name: The secret's name.
            :param api_key: The secret value.
            :param note: A free-text note.
            """
            tools.record("set_secret", {"name": name, "api_key": api_key, "note": note})
            return f"stored {name}"

        return [delete_file, scale_service, read_logs, set_secret]


# --- model replies ------------------------------------------------------------------------------------

_ids = itertools.count(1)


def call(tool_name: str, **arguments: Any) -> ToolCall:
    """A tool call as a model requests it, with a fresh id."""
    return ToolCall(tool_name=tool_name, arguments=arguments, id=f"call_{next(_ids)}")


def asks(*calls: ToolCall, text: str | None = None) -> ChatMessage:
    """An assistant reply requesting ``calls``."""
    return ChatMessage.from_assistant(text=text, tool_calls=list(calls))


def asks_for(tool_name: str, **arguments: Any) -> ChatMessage:
    """An assistant reply requesting one call."""
    return asks(call(tool_name, **arguments))


def says(text: str) -> ChatMessage:
    """An assistant text reply."""
    return ChatMessage.from_assistant(text)


def echoes_results(messages: list[ChatMessage]) -> ChatMessage:
    """A reply that repeats every tool result since the last assistant tool-call message (for assertions)."""
    results = []
    for message in reversed(messages):
        if message.role != ChatRole.TOOL:
            break
        results.insert(0, message.tool_call_result.result)
    return ChatMessage.from_assistant("results: " + " | ".join(results))


def recalls(messages: list[ChatMessage]) -> ChatMessage:
    """A reply that repeats the memories the model was shown ("- fact" lines), or "I don't know." without any."""
    shown = [m.text for m in messages if m.role == ChatRole.SYSTEM and (m.text or "").startswith("Relevant memories:")]
    return ChatMessage.from_assistant(shown[0].split("\n", 1)[1] if shown else "I don't know.")


def dangling_calls(messages: Sequence[ChatMessage]) -> list[str]:
    """Ids of assistant tool calls that no later tool result answers (must be empty before any LLM call)."""
    open_ids: list[str | None] = []
    for message in messages:
        if message.role == ChatRole.ASSISTANT:
            open_ids.extend(c.id for c in message.tool_calls)
        elif message.role == ChatRole.TOOL and message.tool_call_result is not None:
            origin = message.tool_call_result.origin.id
            if origin in open_ids:
                open_ids.remove(origin)
    return [i for i in open_ids if i is not None]


def tool_results(messages: Sequence[ChatMessage]) -> list[tuple[str, str, bool]]:
    """``(tool name, result, error)`` of every tool message, in order."""
    return [
        (m.tool_call_result.origin.tool_name, m.tool_call_result.result, m.tool_call_result.error)
        for m in messages
        if m.role == ChatRole.TOOL and m.tool_call_result is not None
    ]


# --- the harness ----------------------------------------------------------------------------------------


@dataclass
class Harness:
    """A started engine on a SQLite file (or PostgreSQL), its surface, generator, tools and clock."""

    engine: Engine
    surface: RecordingSurface
    generator: Any
    tools: RecordingTools
    clock: Clock
    db_path: Path
    tool_list: list[Tool]
    admins: frozenset[str]
    database_url: str | None = None
    closed: bool = False
    _events: itertools.count = field(default_factory=lambda: itertools.count(1))

    @classmethod
    async def open(
        cls,
        folder: Path,
        *,
        replies: Sequence[Any] = (),
        generator: Any = None,
        tools: RecordingTools | None = None,
        extra_tools: Sequence[Tool] = (),
        clock: Clock | None = None,
        admins: frozenset[str] = frozenset({ADMIN}),
        start: bool = True,
        **config: Any,
    ) -> Harness:
        """Create the engine (``Engine.create``), register the surface, and ``start()`` it without the sweep."""
        tools = tools or RecordingTools()
        clock = clock or Clock()
        tool_list = [*tools.standard(), *extra_tools]
        generator = generator if generator is not None else ScriptedChatGenerator(list(replies))
        db_path = folder / "cs.db"
        engine = await Engine.create(
            Config(db_path=db_path, admins=admins, **config), generator=generator, tools=tool_list, clock=clock
        )
        surface = RecordingSurface()
        engine.register_surface(PLATFORM, surface)
        harness = cls(engine, surface, generator, tools, clock, db_path, tool_list, admins, config.get("database_url"))
        if start:
            await engine.start(sweep=False)
        return harness

    async def reopen(self, *, generator: Any = None, surface: RecordingSurface | None = None, **config: Any) -> Harness:
        """A NEW engine on the same database (as after a restart, or another replica), started; the old one is
        left as is. ``config``: more settings of the new engine's ``Config`` (e.g. ``mcp_servers=…``)."""
        engine = await Engine.create(
            Config(db_path=self.db_path, admins=self.admins, database_url=self.database_url, **config),
            generator=generator if generator is not None else self.generator,
            tools=self.tool_list,
            clock=self.clock,
        )
        surface = surface or RecordingSurface()
        engine.register_surface(PLATFORM, surface)
        await engine.start(sweep=False)
        return Harness(
            engine,
            surface,
            engine.agent.chat_generator,
            self.tools,
            self.clock,
            self.db_path,
            self.tool_list,
            self.admins,
            self.database_url,
        )

    def thread(self, name: str = "1700000000.000100", channel: str = CHANNEL) -> ThreadRef:
        """A thread in the test workspace."""
        return ThreadRef(PLATFORM, WORKSPACE, channel, name)

    def inbound(
        self,
        text: str,
        *,
        thread: str = "1700000000.000100",
        channel: str = CHANNEL,
        user: str = REQUESTER,
        event_id: str | None = None,
    ) -> Inbound:
        """A person's message as an adapter hands it over."""
        return Inbound(
            platform=PLATFORM,
            workspace=WORKSPACE,
            channel=channel,
            thread=thread,
            user=user,
            text=text,
            event_id=event_id or f"Ev-{new_id()}",  # unique across engines on one database
            message_id=f"m-{next(self._events)}",
        )

    async def say(self, text: str, **kwargs: Any) -> None:
        """Send a message and wait for its run to finish or pause."""
        await self.engine.handle_message(self.inbound(text, **kwargs))

    async def paused_approvals(self, text: str, **kwargs: Any) -> list[ApprovalView]:
        """Send a message that must pause; the approvals it rendered."""
        before = len(self.surface.renders)
        await self.say(text, **kwargs)
        renders = self.surface.renders
        assert len(renders) == before + 1, f"expected the message to pause, got {self.surface.calls[-3:]}"
        return list(renders[-1].approvals)

    async def history(self, thread: ThreadRef | None = None) -> list[ChatMessage]:
        """The stored history of a thread."""
        key = (thread or self.thread()).key
        return await self.engine.storage.messages.retrieve_messages(key)

    async def run_of(self, run_id: str) -> Any:
        """The stored run."""
        return await self.engine.storage.runs.get(run_id)

    async def audit(self, action: str | None = None) -> list[Any]:
        """Audit entries (newest first), optionally of one action."""
        entries = await self.engine.storage.audit.recent(200)
        return [e for e in entries if action is None or e.action == action]

    async def close(self) -> None:
        """Stop the engine cleanly (once)."""
        if not self.closed:
            self.closed = True
            await self.engine.stop()


def sent_to_llm(generator: ScriptedChatGenerator, index: int = -1) -> list[ChatMessage]:
    """The messages the generator received on one call."""
    return generator.calls[index]["messages"]


async def bounded(awaitable: Any, within: float = 5.0) -> Any:
    """Await with a bound (seconds), so a regression fails the test instead of hanging it."""
    return await asyncio.wait_for(awaitable, within)


Predicate = Callable[[Any], bool]


class Harnesses:
    """Opens harnesses for one test and stops every engine afterwards (also ones a test abandoned)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.opened: list[Harness] = []

    async def open(self, **kwargs: Any) -> Harness:
        """:meth:`Harness.open` in the test's folder."""
        harness = await Harness.open(self.folder, **kwargs)
        self.opened.append(harness)
        return harness

    async def reopen(self, harness: Harness, **kwargs: Any) -> Harness:
        """:meth:`Harness.reopen`, tracked for clean-up."""
        again = await harness.reopen(**kwargs)
        self.opened.append(again)
        return again

    async def aclose(self) -> None:
        """Stop every engine that is still open."""
        for harness in self.opened:
            await harness.close()
