"""Real ``countersign serve`` processes on one database (a SQLite file, or a PostgreSQL schema), for crash and
replica tests.

:class:`ServeCluster` owns everything a multi-process test needs: the fake Slack Web API (which
records every message the bot sends), the fake OpenAI server answered by :class:`ScriptedModel`, a
:class:`ToolControl` that records every tool execution and holds the slow tools' gates, one database
file, and the processes. Each process is the venv's own ``countersign serve --port 0`` console script
with short lifecycle settings; it is ready when it logs ``listening on http://…``. A test stops one
with SIGTERM (:meth:`ServeProcess.terminate`), crashes one with SIGKILL (:meth:`ServeProcess.kill`) or
with a failpoint (``failpoint="after_claim"``: the process exits with status 86 at that point), and
waits for outcomes by polling durable conditions with a deadline — a row in the database, a call the
fake Slack API recorded, an execution the tools reported — never with a bare sleep. Every process is
killed when the cluster closes, whatever the test did::

    async with ServeCluster.open(tmp_path) as cluster:
        a, b = await cluster.start_many("a", "b")
        cluster.model.plan("delete old.log", [("delete_file", {"path": "old.log"})])
        thread = await cluster.mention(a, "delete old.log")
        card = await cluster.approval_card(thread)
        await cluster.click(b, card, user=ALICE)
        await cluster.wait_for_reply(thread, "Finished")
        assert cluster.control.count("delete_file") == 1
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import psycopg
from aiohttp import web
from psycopg.rows import dict_row

from bot.failpoints import FAILPOINT_EXIT_CODE
from storage.message_rows import message_from_row
from tests.fakes.crash_tools import CONTROL_URL_VARIABLE
from tests.fakes.local_server import serve_locally
from tests.fakes.openai_server import FakeOpenAIServer, ResponseSpec, TextResponse, ToolCallsResponse
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import SlackReply, SlackRequests, form, text_input
from tests.fakes.slack_stack import all_text, button_values

REPO_ROOT = Path(__file__).resolve().parents[2]
SIGNING_SECRET = "crash-test-signing-secret"
BOT_TOKEN = "xoxb-crash-test"
CHANNEL = "C0OPS"
ALICE = "U0ALICE"  # asks the bot and decides her own calls
ADMIN = "U0ADMIN"  # a countersign admin: may decide anyone's calls
READY_PATTERN = re.compile(r"listening on (http://\S+)")
PARKED_FAILPOINT = "before_start"
"""Where a standby process stops itself until its test continues it (see :mod:`bot.failpoints`)."""
PARKED_PATTERN = re.compile(rf"failpoint {PARKED_FAILPOINT} reached")
RESEND = "send yours again"
"""What the bot said before the inbox, when a message arrived while another process ran the thread."""

LEASE_SECONDS = 1.0
HEARTBEAT_SECONDS = 0.25
SWEEP_SECONDS = 0.2
SHUTDOWN_GRACE_SECONDS = 3.0
START_SECONDS = 120.0
"""How long a process may take to log that it listens (imports dominate: ~1.5 s alone on 2 cores, but over 60 s
was seen with two starting at once at load 20; a deadline, not a wait: a process that exits fails at once)."""
OUTCOME_SECONDS = 30.0
"""The default deadline for an outcome: lease expiry plus a sweep or two, with room for a loaded CI box (a
victim's first click, on code paths it never ran, took over 10 s at load ~16 on 2 cores). Only a failing test
waits it out."""
STEADY = {"COUNTERSIGN_LEASE_SECONDS": "30", "COUNTERSIGN_HEARTBEAT_SECONDS": "1"}
"""Settings for a process no test expects to lose a run (``cluster.start(name, env=STEADY)``).

The 1-second lease above is for the processes a test kills or freezes, whose runs another process must take
over quickly. A live process on a loaded box can stall longer than that (its event loop starved of CPU, or
busy a second or more in one step): another process then takes its run over, correctly, as from a crash —
a notice in the thread, a second model call — which is not what a test of a live process checks.
"""

T = TypeVar("T")


class HarnessError(AssertionError):
    """An outcome did not happen in time, or a process did something the test did not expect."""


# ---------------------------------------------------------------------- tool executions and gates


@dataclass(frozen=True)
class Execution:
    """One tool execution, as the tool reported it before acting."""

    tool: str
    arguments: dict[str, Any]
    pid: int


class ToolControl:
    """The test's end of :mod:`tests.fakes.crash_tools`: records executions and holds gates.

    ``POST /executed`` records an execution; ``GET /gate/<name>`` answers once :meth:`release` opened
    ``name`` (at once if it already is). Closing releases every gate so no request outlives the test.
    ``GET /world/<name>`` answers :attr:`world`'s text for ``name``: what a previewed tool's preview reads.
    """

    def __init__(self) -> None:
        self.executions: list[Execution] = []
        self.world: dict[str, str] = {}
        """What the previews of :mod:`tests.fakes.crash_tools` see (issue 30); the test changes it."""
        self._gates: dict[str, asyncio.Event] = {}
        self._waiting: dict[str, int] = {}
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self._port = 0

    async def start(self) -> ToolControl:
        """Serve on an ephemeral port of 127.0.0.1."""
        app = web.Application()
        app.router.add_post("/executed", self._executed)
        app.router.add_get("/gate/{name}", self._gate)
        app.router.add_get("/world/{name}", self._world)
        self._runner, self._port = await serve_locally(app, access_log=None, shutdown_timeout=1.0)
        return self

    async def stop(self) -> None:
        """Open every gate, then stop serving."""
        for gate in self._gates.values():
            gate.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        """What the tools get in ``CRASH_TOOLS_URL``."""
        return f"http://127.0.0.1:{self._port}"

    def count(self, tool: str | None = None, **arguments: Any) -> int:
        """How many executions (of ``tool``, with these ``arguments`` among theirs) were reported."""
        return len(self.of(tool, **arguments))

    def of(self, tool: str | None = None, **arguments: Any) -> list[Execution]:
        """The executions (of ``tool``, with these ``arguments`` among theirs), oldest first."""
        return [
            e
            for e in self.executions
            if (tool is None or e.tool == tool) and all(e.arguments.get(k) == v for k, v in arguments.items())
        ]

    def release(self, name: str) -> None:
        """Let every execution waiting on gate ``name`` (now or later) go on."""
        self._gate_named(name).set()

    async def wait_for(
        self, tool: str, count: int = 1, seconds: float = OUTCOME_SECONDS, **arguments: Any
    ) -> list[Execution]:
        """Wait until ``count`` executions of ``tool`` (with ``arguments``) were reported; return them."""
        await self._wait(
            lambda: self.count(tool, **arguments) >= count, seconds, f"{count} execution(s) of {tool} {arguments}"
        )
        return self.of(tool, **arguments)

    async def wait_blocked(self, name: str, seconds: float = OUTCOME_SECONDS) -> None:
        """Wait until some execution is blocked on gate ``name`` (the slow tool is running)."""
        await self._wait(lambda: self._waiting.get(name, 0) > 0, seconds, f"a tool waiting on gate {name!r}")

    async def _wait(self, ready: Callable[[], bool], seconds: float, what: str) -> None:
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(ready), seconds)
            except TimeoutError:
                raise HarnessError(f"no {what} within {seconds}s; executions so far: {self.executions}") from None

    def _gate_named(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    async def _world(self, request: web.Request) -> web.Response:
        return web.Response(text=self.world.get(request.match_info["name"], "nothing known"))

    async def _executed(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self._changed:
            self.executions.append(Execution(body["tool"], body["arguments"], int(body["pid"])))
            self._changed.notify_all()
        return web.json_response({"ok": True})

    async def _gate(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        async with self._changed:
            self._waiting[name] = self._waiting.get(name, 0) + 1
            self._changed.notify_all()
        try:
            await self._gate_named(name).wait()
        finally:
            self._waiting[name] -= 1
        return web.json_response({"ok": True})


# ---------------------------------------------------------------------- the model


class ScriptedModel:
    """The fake OpenAI server's responder: answers from the conversation alone, never from call order.

    A request whose last message is a person's text gets the tool calls planned for that text (or an
    echo); a request that ends in tool results gets ``"Finished: <result>; <result>"``. So a retried
    request, in either process, gets the same kind of answer, and tool-call ids stay unique.
    :meth:`hold` makes every request wait until :meth:`let_go` (a model that is "thinking").
    """

    def __init__(self) -> None:
        self.plans: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.requests: list[dict[str, Any]] = []
        self._open = asyncio.Event()
        self._open.set()
        self._arrived = asyncio.Condition()
        self.delay = 0.0
        """Seconds every answer takes (a model that thinks, for load tests); 0 answers at once."""

    def plan(self, user_text: str, calls: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """When the last message is ``user_text``, ask for ``calls`` (``[(tool, arguments), ...]``)."""
        self.plans[user_text] = list(calls)

    def hold(self) -> None:
        """Make later requests wait (the model is thinking) until :meth:`let_go`."""
        self._open.clear()

    def let_go(self) -> None:
        """Answer the held requests and every later one at once."""
        self._open.set()

    async def wait_for_requests(self, count: int, seconds: float = OUTCOME_SECONDS) -> None:
        """Wait until ``count`` requests reached the model (answered or held)."""
        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(lambda: len(self.requests) >= count), seconds)
            except TimeoutError:
                raise HarnessError(f"expected {count} model request(s) within {seconds}s") from None

    async def __call__(self, body: dict[str, Any]) -> ResponseSpec:
        async with self._arrived:
            self.requests.append(body)
            self._arrived.notify_all()
        await self._open.wait()
        if self.delay:
            await asyncio.sleep(self.delay)  # the model's own thinking time, not a wait for an outcome
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            results = []
            for message in reversed(messages):
                if message.get("role") != "tool":
                    break
                results.append(str(message.get("content")))
            return TextResponse("Finished: " + "; ".join(reversed(results)))
        if last.get("role") == "user":
            text = _content_text(last.get("content"))
            calls = self.plans.get(text)
            if calls:
                return ToolCallsResponse(list(calls))
            return TextResponse(f"You said: {text}")
        return TextResponse("OK.")


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content or "")


# ---------------------------------------------------------------------- one process


@dataclass
class ServeProcess:
    """One ``countersign serve`` child process and the signed Slack requests aimed at it."""

    name: str
    instance_id: str
    failpoint: str | None
    process: asyncio.subprocess.Process
    log: list[str]
    url: str = ""
    slack: SlackRequests | None = None
    _reader: asyncio.Task[None] | None = None
    _ready: asyncio.Future[str] | None = None
    _parked: asyncio.Future[None] | None = None

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    @property
    def running(self) -> bool:
        """Whether the process has not exited (as far as we have reaped it)."""
        return self.process.returncode is None

    @property
    def stopped(self) -> bool:
        """Whether the process is stopped (SIGSTOP) now, as the kernel reports it (``ps`` where there is no /proc)."""
        try:
            if Path("/proc/self/stat").exists():
                state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            else:
                state = subprocess.run(
                    ["ps", "-o", "stat=", "-p", str(self.pid)], capture_output=True, text=True, check=True
                ).stdout.strip()
        except (FileNotFoundError, subprocess.CalledProcessError):
            state = "gone"
        if not self.running or state.startswith(("Z", "X", "gone")):
            raise HarnessError(f"{self.name} exited\n{self.log_text()}")
        return state.startswith("T")

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind in the child."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM: the graceful shutdown a deployment's rolling restart sends."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)

    def freeze(self) -> None:
        """SIGSTOP: the process does nothing at all (no sweep, no heartbeat) until :meth:`thaw`."""
        if self.running:
            self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT: a frozen process carries on where it stopped."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGCONT)

    async def wait_exit(self, seconds: float = OUTCOME_SECONDS) -> int:
        """Wait for the process to exit; its exit status (``-9`` after SIGKILL, 86 after a failpoint)."""
        try:
            code = await asyncio.wait_for(self.process.wait(), seconds)
        except TimeoutError:
            raise HarnessError(f"{self.name} did not exit within {seconds}s\n{self.log_text()}") from None
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._reader, 2.0)
        return code

    async def wait_failpoint(self, seconds: float = OUTCOME_SECONDS, passed: Callable[[], Any] | None = None) -> None:
        """Wait for the process to stop at its armed failpoint (exit status 86).

        ``passed`` tells that the work went past the point without stopping (e.g. the answer was posted):
        then the failpoint is missing from that code path, and waiting longer would only hide it.
        """
        deadline = time.monotonic() + seconds
        exited = asyncio.ensure_future(self.process.wait())
        while not exited.done() and time.monotonic() < deadline:
            went_past = passed() if passed is not None else None
            if went_past:
                exited.cancel()
                raise HarnessError(
                    f"{self.name} went past failpoint {self.failpoint!r} without stopping: {went_past!r}\n"
                    f"{self.log_text()}"
                )
            await asyncio.wait({exited}, timeout=0.05)
        exited.cancel()
        try:
            code = await self.wait_exit(max(0.1, deadline - time.monotonic()))
        except HarnessError:
            raise HarnessError(
                f"{self.name} did not reach failpoint {self.failpoint!r} within {seconds}s\n{self.log_text()}"
            ) from None
        if code != FAILPOINT_EXIT_CODE:
            raise HarnessError(
                f"{self.name} exited with {code}, not at failpoint {self.failpoint!r}\n{self.log_text()}"
            )

    def log_text(self, last: int = 60) -> str:
        """The end of the process's log, for failure messages."""
        return f"--- log of {self.name} (pid {self.pid}) ---\n" + "\n".join(self.log[-last:])


async def _read_log(
    process: asyncio.subprocess.Process, log: list[str], ready: asyncio.Future[str], parked: asyncio.Future[None]
) -> None:
    """Keep the child's stderr drained (a full pipe would block it) and spot the ready and parked lines."""
    assert process.stderr is not None
    while True:
        raw = await process.stderr.readline()
        if not raw:
            break
        line = raw.decode(errors="replace").rstrip()
        log.append(line)
        found = READY_PATTERN.search(line)
        if found and not ready.done():
            ready.set_result(found.group(1))
        if PARKED_PATTERN.search(line) and not parked.done():
            parked.set_result(None)
    for future, what in ((ready, "ready"), (parked, "parked")):
        if not future.done():
            future.set_exception(HarnessError(f"the process exited before it was {what}"))


# ---------------------------------------------------------------------- the cluster


@dataclass
class Thread:
    """A Slack thread the test started: its channel and ts (the engine's thread key too)."""

    ts: str
    channel: str = CHANNEL
    team: str = "T0TEAM"

    @property
    def key(self) -> str:
        """The chat-history id of this thread (``ThreadRef.key``)."""
        return f"slack:{self.team}:{self.channel}:{self.ts}"


@dataclass
class ApprovalCard:
    """An approval message the bot posted: where, and the approval ids of its buttons."""

    thread: Thread
    ts: str
    approval_ids: list[str]
    call: SlackCall

    @property
    def approval_id(self) -> str:
        """The only approval of a one-call step."""
        [only] = self.approval_ids
        return only


@dataclass
class ServeCluster:
    """Processes on one database plus the fakes they talk to (see the module docstring)."""

    root: Path
    slack: FakeSlackAPI
    openai: FakeOpenAIServer
    model: ScriptedModel
    control: ToolControl
    session: aiohttp.ClientSession
    admins: tuple[str, ...] = (ADMIN,)
    database_url: str | None = None
    """A ``postgresql://`` URL (its own schema): the processes share it instead of the SQLite file."""
    processes: list[ServeProcess] = field(default_factory=list)
    _requests: SlackRequests | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls, root: Path, *, admins: Iterable[str] = (ADMIN,), database_url: str | None = None
    ) -> AsyncIterator[ServeCluster]:
        """Start the fakes; on exit kill every process still running and stop the fakes.

        With ``database_url`` the processes share that PostgreSQL schema instead of a SQLite file.
        """
        model = ScriptedModel()
        slack = await FakeSlackAPI().start()
        openai = await FakeOpenAIServer(responder=model).start_async()
        control = await ToolControl().start()
        session = aiohttp.ClientSession()
        cluster = cls(root, slack, openai, model, control, session, admins=tuple(admins), database_url=database_url)
        try:
            yield cluster
        finally:
            await cluster.close()

    async def close(self) -> None:
        """Kill every process (SIGKILL: a test that failed half-way must not leave one behind), stop the fakes."""
        for proc in self.processes:
            proc.kill()
        for proc in self.processes:
            with contextlib.suppress(HarnessError):
                await proc.wait_exit(5.0)
            if proc._reader is not None and not proc._reader.done():
                proc._reader.cancel()
        self.model.let_go()
        await self.session.close()
        await self.control.stop()
        await self.openai.stop_async()
        await self.slack.stop()

    # ------------------------------------------------------------------ processes

    @property
    def db_path(self) -> Path:
        """The one SQLite file every process shares."""
        return self.root / "countersign.db"

    def environment(self, instance_id: str, failpoint: str | None, overrides: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: the parent's minus any countersign/Slack/OpenAI setting, plus ours."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("COUNTERSIGN_", "SLACK_", "OPENAI_", "CONNECTIONS__"))
        }
        env.update(
            {
                "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                **(
                    {"COUNTERSIGN_DATABASE_URL": self.database_url}
                    if self.database_url
                    else {"COUNTERSIGN_DB": str(self.db_path)}
                ),
                "COUNTERSIGN_TOOLS": "tests.fakes.crash_tools:tools",
                "COUNTERSIGN_ADMINS": ",".join(self.admins),
                "SLACK_BOT_TOKEN": BOT_TOKEN,
                "SLACK_SIGNING_SECRET": SIGNING_SECRET,
                "COUNTERSIGN_SLACK_API_URL": self.slack.base_url,
                "OPENAI_BASE_URL": self.openai.base_url,
                "OPENAI_API_KEY": "test-key",
                CONTROL_URL_VARIABLE: self.control.url,
                "COUNTERSIGN_INSTANCE_ID": instance_id,
                "COUNTERSIGN_LEASE_SECONDS": str(LEASE_SECONDS),
                "COUNTERSIGN_HEARTBEAT_SECONDS": str(HEARTBEAT_SECONDS),
                "COUNTERSIGN_SWEEP_SECONDS": str(SWEEP_SECONDS),
                "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": str(SHUTDOWN_GRACE_SECONDS),
                # Answers are posted once (these tests count them), unless a test streams on purpose.
                "COUNTERSIGN_STREAM_UPDATE_SECONDS": "30",
            }
        )
        if failpoint:
            env["COUNTERSIGN_FAILPOINT"] = failpoint
        env.update(overrides)
        return env

    async def start(
        self, name: str, *, failpoint: str | None = None, env: Mapping[str, str] | None = None
    ) -> ServeProcess:
        """Start ``countersign serve --port 0`` and return once it listens (its instance id is ``name``)."""
        proc = await self._spawn(name, failpoint, env or {})
        await self.until_ready(proc)
        return proc

    async def start_parked(self, name: str, *, failpoint: str | None = None) -> ServeProcess:
        """Start ``countersign serve`` and return once it stopped itself before any work (failpoint
        ``before_start``): loaded, but it has taken no run and started no message. :meth:`resume_parked` it."""
        proc = await self._spawn(name, failpoint, {}, parked=True)
        assert proc._parked is not None
        try:
            await asyncio.wait_for(asyncio.shield(proc._parked), START_SECONDS)
        except (TimeoutError, HarnessError):
            raise HarnessError(f"{name} did not stop before its start\n{proc.log_text()}") from None
        # The line comes just before the process stops itself: a SIGCONT sent in between would be lost and the
        # process would then stop for good. Its next step is that stop, so waiting for it is short.
        await self.wait_until(lambda: proc.stopped, f"{name} stopped after saying it stops", seconds=START_SECONDS)
        return proc

    async def resume_parked(self, proc: ServeProcess) -> ServeProcess:
        """Continue a process from :meth:`start_parked` and return once it listens."""
        proc.thaw()
        await self.until_ready(proc)
        return proc

    async def until_ready(self, proc: ServeProcess) -> None:
        """Wait for ``proc`` to log that it listens; set its URL and its Slack requests."""
        assert proc._ready is not None
        try:
            base_url = await asyncio.wait_for(asyncio.shield(proc._ready), START_SECONDS)
        except (TimeoutError, HarnessError):
            raise HarnessError(f"{proc.name} did not become ready\n{proc.log_text()}") from None
        proc.url = base_url
        proc.slack = dataclasses.replace(self._base_requests(), url=f"{base_url}/slack/events")

    async def _spawn(
        self, name: str, failpoint: str | None, env: Mapping[str, str], *, parked: bool = False
    ) -> ServeProcess:
        command = _console_script()
        failpoints = [failpoint] if failpoint else []
        if parked:
            failpoints.append(PARKED_FAILPOINT)
        workdir = self.root / f"work-{name}"
        workdir.mkdir(parents=True, exist_ok=True)  # no stray .env, no sandbox files in the checkout
        process = await asyncio.create_subprocess_exec(
            command,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            cwd=workdir,
            env=self.environment(name, ",".join(failpoints), env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            preexec_fn=_die_with_parent,
        )
        log: list[str] = []
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[str] = loop.create_future()
        parked_there: asyncio.Future[None] = loop.create_future()
        # Nobody awaits them any more once a start is given up (a standby cancelled at the end of a module), and
        # only a parked start awaits the second.
        for future in (ready, parked_there):
            future.add_done_callback(lambda done: done.cancelled() or done.exception())
        proc = ServeProcess(name, name, failpoint, process, log, _ready=ready, _parked=parked_there)
        proc._reader = asyncio.create_task(_read_log(process, log, ready, parked_there), name=f"log-{name}")
        self.processes.append(proc)
        return proc

    @contextlib.asynccontextmanager
    async def frozen(self, *processes: ServeProcess) -> AsyncIterator[None]:
        """Freeze ``processes`` for the block, so the others alone act in it (thawed however the block ends).

        Every process sweeps for decided steps and waiting messages, so without this the survivor may take
        the work before the victim reaches its failpoint; frozen, it can only recover what the victim left.
        """
        await self.freeze(*processes)
        try:
            yield
        finally:
            for proc in processes:
                proc.thaw()

    async def freeze(self, *processes: ServeProcess) -> None:
        """SIGSTOP ``processes`` at a moment none of them holds the database's write lock.

        (PostgreSQL has no database-wide write lock: a frozen process holds at most its own rows' locks.)
        """
        for _attempt in range(100):
            for proc in processes:
                proc.freeze()
            if self._write_lock_free():
                return
            # Stopped inside a write transaction: the others would wait on its lock. Let it finish, try again.
            for proc in processes:
                proc.thaw()
            await asyncio.sleep(0.01)
        raise HarnessError("could not freeze the processes outside a write transaction")

    async def start_many(self, *names: str, **options: Any) -> list[ServeProcess]:
        """Start several processes at once (their imports overlap on two cores)."""
        return list(await asyncio.gather(*(self.start(name, **options) for name in names)))

    def _base_requests(self) -> SlackRequests:
        # One counter for every process's requests: message ts and event ids must never repeat across them.
        if self._requests is None:
            self._requests = SlackRequests("", SIGNING_SECRET, self.session, team_id=self.slack.team_id)
        return self._requests

    # ------------------------------------------------------------------ Slack traffic

    async def mention(
        self,
        to: ServeProcess | list[ServeProcess],
        text: str,
        *,
        user: str = ALICE,
        thread: Thread | None = None,
        may_die_after_storing: bool = False,
    ) -> Thread:
        """``@countersign text`` as a new thread (or in ``thread``); returns the thread.

        With several processes, the event goes to the first; if that one dies before acknowledging it,
        it is retried on the next with Slack's retry headers, as Slack does behind a load balancer.
        ``may_die_after_storing``: the message is stored before the acknowledgement, so a failpoint reached
        right after storing may kill the only target before it answers; the caller then checks that the
        message was not lost.
        """
        requests = self._base_requests()
        ts = requests.next_ts()
        event = requests.mention(
            user, CHANNEL, f"<@{self.slack.bot_user_id}> {text}", ts=ts, thread_ts=thread.ts if thread else None
        )
        targets = to if isinstance(to, list) else [to]
        event_id = f"Ev{ts.replace('.', '')}"
        for attempt, target in enumerate(targets):
            retry = attempt or None
            reply = await _send(target, lambda r, retry=retry: r.event(event, event_id=event_id, retry_num=retry))
            if reply is not None and reply.status == 200:
                break
        else:
            if not (may_die_after_storing and reply is None):
                raise HarnessError(f"no process acknowledged the mention {text!r}")
        return thread or Thread(ts)

    async def click(
        self, to: ServeProcess, card: ApprovalCard, *, user: str = ALICE, action: str = "cs_approve", index: int = 0
    ) -> SlackReply | None:
        """Click a button of ``card`` on ``to``; ``None`` if the process died before answering."""
        approval_id = card.approval_ids[index]
        return await _send(
            to,
            lambda r: r.click(
                action,
                approval_id,
                user=user,
                channel=card.thread.channel,
                message_ts=card.ts,
                thread_ts=card.thread.ts,
            ),
        )

    async def reject(self, to: ServeProcess, card: ApprovalCard, feedback: str, *, user: str = ALICE) -> None:
        """Reject through the modal: click Reject on ``to``, then submit the feedback to ``to`` too."""
        opened_before = len(self.slack.calls_to("views.open"))
        reply = await self.click(to, card, user=user, action="cs_reject")
        assert reply is not None and reply.status == 200, f"reject click failed\n{to.log_text()}"
        opened = await self.slack.wait_for("views.open", count=opened_before + 1, seconds=OUTCOME_SECONDS)
        view = opened[-1].args["view"]
        values = form("feedback", cs_feedback=text_input(feedback))
        # The decision is made before the ack: a failpoint there kills the process before it answers.
        await _send(to, lambda r: r.submit(view, values, user=user))

    # ------------------------------------------------------------------ what the bot sent

    def posts_in(self, thread: Thread) -> list[SlackCall]:
        """Every message the bot posted in ``thread`` (plain answers and approval cards), oldest first."""
        return self.slack.calls_to(
            "chat.postMessage",
            lambda c: c.args.get("thread_ts") == thread.ts and c.args.get("channel") == thread.channel,
        )

    def replies_in(self, thread: Thread) -> list[str]:
        """The texts of the plain messages (no buttons) the bot posted in ``thread``."""
        return [c.args.get("text", "") for c in self.posts_in(thread) if not c.args.get("blocks")]

    def ephemerals_to(self, user: str, thread: Thread | None = None) -> list[str]:
        """Texts only ``user`` was shown (in ``thread``)."""
        return [
            c.args.get("text", "")
            for c in self.slack.calls_to("chat.postEphemeral")
            if c.args["user"] == user and (thread is None or c.args.get("thread_ts") == thread.ts)
        ]

    def card_updates(self, card: ApprovalCard) -> list[str]:
        """Every re-rendering of ``card`` (``chat.update``), as text."""
        updates = self.slack.calls_to("chat.update", lambda c: c.args.get("ts") == card.ts)
        return [all_text(c.args.get("blocks") or []) for c in updates]

    async def approval_card(self, thread: Thread, count: int = 1, seconds: float = OUTCOME_SECONDS) -> ApprovalCard:
        """Wait for the ``count``-th approval message in ``thread``; return it."""

        def card_here(call: SlackCall) -> bool:
            return bool(call.args.get("blocks")) and call.args.get("thread_ts") == thread.ts

        try:
            calls = await self.slack.wait_for("chat.postMessage", count=count, where=card_here, seconds=seconds)
        except AssertionError as missing:
            raise HarnessError(f"{missing}\n{self.describe(thread)}\n{self.logs()}") from None
        call = calls[count - 1]
        ids = button_values(call.args["blocks"], "cs_approve")
        assert ids, f"an approval message without Approve buttons: {call.args}"
        card = ApprovalCard(thread, call.response["ts"], ids, call)
        # Posted is not yet finished: the run pauses for good once the card's reference is stored.
        await self.wait_until(lambda: self._card_stored(card), f"the reference of card {card.ts} stored", seconds)
        return card

    def _card_stored(self, card: ApprovalCard) -> bool:
        marks = ",".join("?" * len(card.approval_ids))
        rows = self.query(f"SELECT message_ref_json FROM approvals WHERE approval_id IN ({marks})", card.approval_ids)
        refs = [json.dumps(_json(r["message_ref_json"])) for r in rows]
        return len(rows) == len(card.approval_ids) and all(card.ts in ref for ref in refs)

    async def wait_for_reply(
        self, thread: Thread, containing: str, count: int = 1, seconds: float = OUTCOME_SECONDS
    ) -> list[str]:
        """Wait until ``count`` plain messages in ``thread`` contain ``containing`` (case-insensitive)."""

        def matches(call: SlackCall) -> bool:
            return (
                call.args.get("thread_ts") == thread.ts
                and not call.args.get("blocks")
                and containing.lower() in str(call.args.get("text", "")).lower()
            )

        try:
            await self.slack.wait_for("chat.postMessage", count=count, where=matches, seconds=seconds)
        except AssertionError:
            raise HarnessError(
                f"no reply containing {containing!r} in the thread within {seconds}s; replies: "
                f"{self.replies_in(thread)}\n{self.logs()}"
            ) from None
        return self.replies_in(thread)

    def logs(self) -> str:
        """Every process's log tail (for failure messages)."""
        return "\n".join(p.log_text(30) for p in self.processes)

    # ------------------------------------------------------------------ the database

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[Any]:
        """Run a read-only query on the shared database (a fresh connection: never holds a lock).

        Written for SQLite (``?`` placeholders, ``rowid``); on PostgreSQL they become ``%s`` and ``seq``, and
        rows are dicts (JSON columns come back decoded: read them with :func:`_json`).
        """
        if self.database_url:
            with psycopg.connect(self.database_url, autocommit=True, row_factory=dict_row) as conn:
                return list(conn.execute(sql.replace("?", "%s").replace("rowid", "seq"), list(params)))
        if not self.db_path.exists():
            return []
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=5.0)
        conn.row_factory = sqlite3.Row
        try:
            return list(conn.execute(sql, list(params)))
        finally:
            conn.close()

    @contextlib.contextmanager
    def write_lock_held(self) -> Iterator[None]:
        """Hold the database's write lock for the block: every process's writes wait (reads go on)."""
        conn = sqlite3.connect(self.db_path, timeout=5.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()

    def _write_lock_free(self) -> bool:
        """Whether no process holds the database's write lock now (probed with an empty write transaction)."""
        if self.database_url:
            return True
        conn = sqlite3.connect(self.db_path, timeout=0.05, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError:
            return False
        finally:
            conn.close()

    def history(self, thread: Thread) -> list[dict[str, Any]]:
        """The stored messages of ``thread`` in order (``ChatMessage.to_dict()`` shapes)."""
        # Rows hold a compact body (storage.message_rows); on SQLite under the thread's integer id.
        if self.database_url:
            sql = "SELECT role, message_id, data::text AS data FROM messages WHERE chat_history_id = ? ORDER BY seq"
        else:
            sql = (
                "SELECT m.role, m.message_id, m.data FROM messages m JOIN threads t ON t.id = m.thread_id "
                "WHERE t.key = ? ORDER BY m.seq"
            )
        rows = self.query(sql, [thread.key])
        return [message_from_row(thread.key, row["role"], row["message_id"], row["data"]).to_dict() for row in rows]

    def queued(self, thread: Thread) -> list[str]:
        """The texts of the messages waiting in ``thread``'s inbox, in the order they will run."""
        rows = self.query("SELECT message_json FROM inbox WHERE chat_history_id = ? ORDER BY id", [thread.key])
        return [_json(row["message_json"]).get("text") or "" for row in rows]

    def runs(self, thread: Thread) -> list[Any]:
        """The runs of ``thread``, oldest first."""
        return self.query("SELECT * FROM runs WHERE chat_history_id = ? ORDER BY created_at, rowid", [thread.key])

    def ledger(self, thread: Thread) -> list[Any]:
        """The execution-ledger entries of every run of ``thread``, oldest first."""
        return self.query(
            "SELECT ledger.* FROM ledger JOIN runs ON runs.run_id = ledger.run_id "
            "WHERE runs.chat_history_id = ? ORDER BY ledger.started_at",
            [thread.key],
        )

    def describe(self, thread: Thread) -> str:
        """The thread's runs, ledger, stored history and replies, for failure messages."""
        runs = [dict(r) for r in self.runs(thread)]
        for run in runs:
            run.pop("snapshot_json", None)
        ledger = [dict(e) for e in self.ledger(thread)]
        approvals = [
            {k: row[k] for k in ("approval_id", "step", "tool_call_id", "status", "decided_by")}
            for row in self.query("SELECT * FROM approvals WHERE chat_history_id = ? ORDER BY created_at", [thread.key])
        ]
        history = [
            (m["role"], m.get("text"), m.get("tool_calls"), m.get("tool_call_result")) for m in self.history(thread)
        ]
        replies = self.replies_in(thread)
        inbox = [dict(r) for r in self.query("SELECT * FROM inbox WHERE chat_history_id = ?", [thread.key])]
        outbox = [dict(r) for r in self.query("SELECT * FROM outbox WHERE chat_history_id = ?", [thread.key])]
        replies = f"{replies}\ninbox: {inbox}\noutbox: {outbox}"
        return f"runs: {runs}\napprovals: {approvals}\nledger: {ledger}\nhistory: {history}\nreplies: {replies}"

    async def assert_settled(self, thread: Thread) -> None:
        """The thread is at rest and nobody was left uninformed.

        No run still active; no stored tool call without a result; every message owed to the thread (the
        outbox) delivered and seen by Slack; nobody asked to send a message again.
        """

        def settled() -> bool:
            return not self.unsettled_runs(thread) and not self.undelivered(thread)

        try:
            await self.wait_until(settled, "every run settled and every owed message delivered")
        except HarnessError as unsettled:
            raise HarnessError(f"{unsettled}\n{self.describe(thread)}") from None
        assert dangling_calls(self.history(thread)) == [], self.describe(thread)
        posted = " ".join(self.replies_in(thread))
        # Approval cards owed with a pause (key card:…) are shown as cards, not as replies with their text.
        owed = [
            row["text"]
            for row in self.query(
                "SELECT text FROM outbox WHERE chat_history_id = ? AND key NOT LIKE ?", [thread.key, "card:%"]
            )
        ]
        assert all(_slack_text(text) in posted for text in owed), f"owed {owed}, posted {self.replies_in(thread)}"
        assert not any(RESEND in text for text in self.replies_in(thread)), self.replies_in(thread)

    def undelivered(self, thread: Thread) -> list[str]:
        """Messages owed to ``thread`` that no process has delivered yet."""
        rows = self.query("SELECT text FROM outbox WHERE chat_history_id = ? AND delivered_at IS NULL", [thread.key])
        return [row["text"] for row in rows]

    def unsettled_runs(self, thread: Thread) -> list[Any]:
        """Runs of ``thread`` still running, resuming or paused."""
        return [r for r in self.runs(thread) if r["status"] in ("running", "resuming", "paused")]

    async def wait_until(
        self, condition: Callable[[], T], what: str, seconds: float = OUTCOME_SECONDS, every: float = 0.05
    ) -> T:
        """Poll ``condition`` (a durable fact: a row, a recorded call) until it is truthy; return its value."""
        deadline = time.monotonic() + seconds
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise HarnessError(f"{what}: not within {seconds}s\n{self.logs()}")
            await asyncio.sleep(every)  # a poll interval, not synchronisation: the condition decides

    async def observe_for(self, seconds: float, invariant: Callable[[], None]) -> None:
        """Check ``invariant`` repeatedly for ``seconds``: for "X does not happen" claims, which need a window.

        The window is measured in lease periods by the caller; nothing waits on it for synchronisation.
        """
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            invariant()
            await asyncio.sleep(0.05)
        invariant()


def _json(value: Any) -> Any:
    """A JSON column's value: SQLite returns its text, PostgreSQL the decoded value."""
    return json.loads(value) if isinstance(value, str) else value


async def _send(target: ServeProcess, send: Callable[[SlackRequests], Any]) -> SlackReply | None:
    """Send a request to ``target``; ``None`` if the process is gone or died before answering."""
    assert target.slack is not None
    if not target.running:
        return None
    try:
        return await send(target.slack)
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError):
        return None


def _parent_death_signal() -> Callable[[], None] | None:
    """On Linux, a child set up with this gets SIGKILL when the test process dies, even by ``kill -9``.

    Teardown kills every process; this covers the one case it cannot: pytest itself killed.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1

    def arm() -> None:  # runs in the child between fork and exec: no imports, no allocation to speak of
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)

    return arm


_die_with_parent = _parent_death_signal()


def _console_script() -> str:
    """The venv's ``countersign`` console script (beside the running interpreter)."""
    beside = Path(sys.executable).with_name("countersign")
    if beside.exists():
        return str(beside)
    found = shutil.which("countersign")
    if found is None:
        raise HarnessError("the countersign console script is not installed (pip install -e '.[test]')")
    return found


class Standby:
    """Processes started ahead of the tests that will crash them, stopped until a test takes one.

    Starting ``countersign serve`` costs about a second and a half of imports; started a few at a time
    while earlier tests run, the victims of a module cost little more than one start in all. Each stops
    itself (failpoint ``before_start``) once loaded and before it does anything: no start-up recovery, no
    sweep, no wake-up. So it cannot take part in (or crash during) another test's recovery — which a
    process frozen from outside once it listened could: its start-up recovery and first sweeps came first.
    """

    def __init__(self, cluster: ServeCluster, failpoints: Iterable[str | None], *, at_once: int = 3) -> None:
        self.cluster = cluster
        self._limit = asyncio.Semaphore(at_once)
        self._ready: dict[str | None, list[asyncio.Task[ServeProcess]]] = {}
        for number, failpoint in enumerate(failpoints):
            task = asyncio.create_task(self._start(f"victim-{failpoint or 'plain'}-{number}", failpoint))
            self._ready.setdefault(failpoint, []).append(task)

    async def take(self, failpoint: str | None) -> ServeProcess:
        """A running process armed with ``failpoint`` (``None``: none), thawed; started now if none waits."""
        waiting = self._ready.get(failpoint) or []
        if not waiting:
            return await self.cluster.start(
                f"victim-{failpoint or 'plain'}-{len(self.cluster.processes)}", failpoint=failpoint
            )
        proc = await waiting.pop(0)
        return await self.cluster.resume_parked(proc)

    async def parked(self) -> list[ServeProcess]:
        """Every process of the pool not taken yet, once each has stopped before its start."""
        return list(await asyncio.gather(*(task for waiting in self._ready.values() for task in waiting)))

    async def close(self) -> None:
        """Stop starting processes (the cluster kills the ones that started)."""
        tasks = [task for waiting in self._ready.values() for task in waiting]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _start(self, name: str, failpoint: str | None) -> ServeProcess:
        async with self._limit:
            return await self.cluster.start_parked(name, failpoint=failpoint)


# ---------------------------------------------------------------------- reading stored history


def _slack_text(text: str) -> str:
    """The part of an owed message that survives Slack's mrkdwn conversion unchanged (its first words)."""
    return " ".join(text.split()[:4]).rstrip(".,:;*_`")


def roles(history: list[dict[str, Any]]) -> list[str]:
    """``user``/``assistant``/``tool`` per stored message, for shape assertions."""
    return [m["role"] for m in history]


def tool_results(history: list[dict[str, Any]]) -> list[str]:
    """The result text of every stored tool message, in order."""
    return [m["tool_call_result"]["result"] for m in history if m.get("tool_call_result")]


def dangling_calls(history: list[dict[str, Any]]) -> list[str]:
    """Ids of assistant tool calls without a stored result (there must be none once a run settles)."""
    answered = {m["tool_call_result"]["origin"].get("id") for m in history if m.get("tool_call_result")}
    return [c.get("id") for m in history for c in m.get("tool_calls") or [] if c.get("id") not in answered]


def duplicate_results(history: list[dict[str, Any]]) -> list[str]:
    """Ids of tool calls with more than one stored result (OpenAI refuses such a history with HTTP 400)."""
    seen: dict[str, int] = {}
    for m in history:
        if m.get("tool_call_result"):
            call_id = m["tool_call_result"]["origin"].get("id")
            seen[call_id] = seen.get(call_id, 0) + 1
    return [call_id for call_id, count in seen.items() if count > 1]


def openai_conversation_problems(messages: list[dict[str, Any]]) -> list[str]:
    """What OpenAI would refuse in a chat-completions ``messages`` list: a tool call without exactly one
    answer right after its assistant message, or a tool message answering no call."""
    problems = []
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if call_id in open_calls:
                open_calls.remove(call_id)
            else:
                problems.append(f"message {index}: a tool result for {call_id!r}, which no open call asked for")
            continue
        if open_calls:
            problems.append(f"message {index}: calls {open_calls} left without results")
            open_calls = []
        if message.get("role") == "assistant":
            open_calls = [call["id"] for call in message.get("tool_calls") or []]
    if open_calls:
        problems.append(f"calls {open_calls} left without results at the end")
    return problems
