"""The ``countersign`` command: ``chat`` in the terminal, ``serve`` for Slack and Teams, ``--version``.

Nothing here imports ``adapters/``: the console runner is found through the ``countersign.console``
entry-point group and the chat platforms through ``countersign.server_plugins`` (see bot/server.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Any

from bot.config import Config, ConfigError, check_db_path
from bot.redaction import mask_text

logger = logging.getLogger("countersign")

CONSOLE_GROUP = "countersign.console"
CONSOLE_ENTRY = "chat"
EXIT_CONFIG_ERROR = 2
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

ENVIRONMENT_HELP = """\
configuration (environment variables; a .env file in the working folder is read too):
  COUNTERSIGN_DB                   SQLite database file (default: countersign.db in the working folder)
  COUNTERSIGN_DATABASE_URL         postgresql://user:password@host/db: use PostgreSQL instead of the
                                   SQLite file, for several replicas sharing one database (default: unset)
  COUNTERSIGN_DB_POOL_SIZE         PostgreSQL only: at most this many connections per replica, a whole
                                   number of at least 2 (default: 10)
  COUNTERSIGN_DB_POOL_TIMEOUT      PostgreSQL only: how long work waits for a free pooled connection
                                   before it fails, a duration such as 30s or 2m (default: 30s)
  COUNTERSIGN_MAX_ACTIVE_RUNS      at most this many runs work at once in each process; the others wait
                                   their turn, in order, while new messages are still stored and
                                   acknowledged at once (default: 40)
  COUNTERSIGN_TOOLS                comma-separated module:attribute specs; each attribute is a Tool, a
                                   list of Tools or a Toolset (default: bot.demo_tools:demo_tools, file
                                   tools confined to ./countersign-sandbox)
  COUNTERSIGN_ADMINS               comma-separated user ids allowed to change policies; @name for an
                                   approver group, subteam^S... for a Slack user group (default: none;
                                   in `countersign chat` your user id is your OS user name or --user)
  COUNTERSIGN_REPLY_MODE           whom the bot answers in a channel thread: requester (the person who
                                   started the thread's run, or anyone mentioning the bot), mention (only
                                   mentions) or all (every reply); DMs are always answered (default: requester)
  COUNTERSIGN_REMIND_AT            fraction of an approval's TTL after which approvers who have not
                                   answered are reminded once; 0 turns reminders off (default: 0.5)
  COUNTERSIGN_PREVIEW_TIMEOUT      how long a tool's preview may take, at a pause and again before the call
                                   runs; a slower one is shown as timed out (default: 10s)
  COUNTERSIGN_MODEL                model name for the OpenAI-compatible endpoint (default: gpt-4o-mini)
  OPENAI_API_KEY, OPENAI_BASE_URL  the OpenAI client's own variables; any OpenAI-compatible server (vLLM,
                                   Ollama, llama.cpp). Neither set: the offline demo model answers
  COUNTERSIGN_LLM_TIMEOUT          seconds one model call may take before it is retried or reported
                                   (default: 60; with retries the total wait is at most about
                                   timeout x (retries + 1) plus short pauses)
  COUNTERSIGN_LLM_RETRIES          how often a failed or timed-out model call is retried (default: 2)
  COUNTERSIGN_HISTORY_LAST_K       how many earlier messages of a thread the model sees (default: 30)
  COUNTERSIGN_MEMORY_NOTES         1 or 0: an answer that drew on a remembered fact ends with a short
                                   note, e.g. "(from channel memory: ...)" (default: 1)
  COUNTERSIGN_SYSTEM_PROMPT        the model's instructions: the text itself, or @path to read them from
                                   a UTF-8 file at start (default: a short ops-assistant prompt)
  COUNTERSIGN_GENERATION_KWARGS    a JSON object of extra chat-completion parameters, e.g.
                                   {"temperature": 0.2, "max_tokens": 800, "reasoning_effort": "low"}
                                   (model, messages, tools, stream, stream_options and n are refused)
  COUNTERSIGN_MAX_STEPS            model calls one run may make before it stops unfinished, 1 to 1000
                                   (default: 100)
  COUNTERSIGN_LLM_HEADERS          a JSON object of extra HTTP headers for every model call, for gateways,
                                   e.g. {"api-key": "..."}; the values are never logged (default: none)
  COUNTERSIGN_STREAM_UPDATE_SECONDS
                                   a streamed answer's message is updated at most this often, per message
                                   (default: 1)
  COUNTERSIGN_DEFAULT_TTL          how long an approval waits before it expires and the call is
                                   rejected: 30m, 4h, 2d or seconds, at most 90d (default: 24h)
  SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN
                                   Slack credentials; the app token (xapp-...) selects Socket Mode
  COUNTERSIGN_SLACK_API_URL        base URL of the Slack Web API (default: Slack's own)
  CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID, ...CLIENTSECRET, ...TENANTID
                                   Teams: the Microsoft 365 Agents SDK's own connection settings
  COUNTERSIGN_TEAMS_ANONYMOUS      1 accepts Teams requests without a JWT: local testing only; the server
                                   warns loudly at start (default: off)
  COUNTERSIGN_TEAMS_USER_VIEWS     auto|on|off: approval buttons per person (refresh.userIds) or on the
                                   shared card; auto: per person only in Teams itself (docs/teams-hosts.md)
  COUNTERSIGN_INSTANCE_ID          this process's name as the owner of the runs it works on; a restart
                                   under the same id takes its runs back at once (default for serve: an id
                                   kept in <db>.instance for SQLite, the hostname for PostgreSQL)
  COUNTERSIGN_LEASE_SECONDS        how long a run stays with its process without a heartbeat before another
                                   process takes it over (default: 30)
  COUNTERSIGN_HEARTBEAT_SECONDS    how often a process renews the leases of its runs; less than the lease
                                   (default: 10)
  COUNTERSIGN_SHUTDOWN_GRACE_SECONDS
                                   on SIGTERM, how long in-flight work may finish before this process hands
                                   its runs to the others (default: 20)
  COUNTERSIGN_SWEEP_SECONDS        interval of the expiry sweep, crash recovery and retries of undelivered
                                   messages; fractions allowed (default: 30)
  COUNTERSIGN_FAILPOINT            crash tests only: comma-separated failpoint names where `serve` exits
                                   at once, or stops until continued (before_start; see README,
                                   "Failpoints"); unset in production
  COUNTERSIGN_LOG_FORMAT           text (a line with key=value context) or json (one JSON object a line);
                                   both carry run_id, approval_id, thread_key, tool, surface (default: text)
  COUNTERSIGN_SNAPSHOT_RETENTION   ended runs drop their resume snapshots after this long: 36h, 7d, ... or
                                   never (default: 7d)
  COUNTERSIGN_RETENTION_DAYS       prune ended runs, their approvals and ledger entries, idle threads'
                                   messages and delivered outbox rows older than this many days (default:
                                   0, off; active runs and pending approvals are never touched)
  COUNTERSIGN_AUDIT_RETENTION_DAYS prune audit entries older than this many days; the hash chain stays
                                   verifiable from the first entry left (default: 0, never)
"""

SERVE_ONLY_SETTINGS = frozenset(
    {
        "COUNTERSIGN_REPLY_MODE",
        "COUNTERSIGN_REMIND_AT",
        "COUNTERSIGN_STREAM_UPDATE_SECONDS",
        "SLACK_BOT_TOKEN",
        "COUNTERSIGN_SLACK_API_URL",
        "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID",
        "COUNTERSIGN_TEAMS_ANONYMOUS",
        "COUNTERSIGN_TEAMS_USER_VIEWS",
        "COUNTERSIGN_INSTANCE_ID",
        "COUNTERSIGN_LEASE_SECONDS",
        "COUNTERSIGN_HEARTBEAT_SECONDS",
        "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS",
        "COUNTERSIGN_FAILPOINT",
    }
)
"""Settings of channel threads, the chat platforms and several replicas: ``chat --help`` leaves them out."""


def settings_help(leave_out: frozenset[str] = frozenset()) -> str:
    """:data:`ENVIRONMENT_HELP` without the entries whose first variable is in ``leave_out``."""
    header, *lines = ENVIRONMENT_HELP.splitlines(keepends=True)
    entries: list[list[str]] = []
    for line in lines:
        if line.startswith("  ") and not line.startswith("   "):  # an entry's first line names its variable
            entries.append([line])
        else:
            entries[-1].append(line)
    kept = [entry for entry in entries if entry[0].split()[0].rstrip(",") not in leave_out]
    return header + "".join("".join(entry) for entry in kept)


DESCRIPTION = (
    "countersign: a chat-ops bot. People chat with an LLM agent; every sensitive tool call waits for a "
    "human's approval (approve, reject with feedback, or edit its parameters) and then runs exactly once."
)

CHAT_DESCRIPTION = """\
Chat with the agent in this terminal, through the same engine as Slack and Teams: the same
policies, history, expiry and audit log, stored in COUNTERSIGN_DB.

When a tool call needs approval it is shown with its arguments (secrets masked), and you answer:
  y  approve: the call runs as shown
  n  reject: the call does not run; you may tell the model why
  m  modify: edit the parameters one by one (Enter keeps a value), then it runs with your values
Enter alone never approves. Commands: /help, /quit, and the admin commands /policy, /approvers,
/quorum, /four-eyes, /ttl, /justification, /respondable, /breakglass, /group, /access, /dm, /mcp,
/pending, /audit, /memory, /usage (changes need your user in COUNTERSIGN_ADMINS; /help shows each one's syntax).
With the offline model, "call <tool> key=value ..." calls any configured tool.
Ctrl-C while the assistant works stops it after its current step (a tool already running finishes;
a third Ctrl-C quits without waiting, and that tool's outcome is recorded as unknown).
Ctrl-D, or Ctrl-C at the prompt, ends the chat; pending approvals wait for you: continue with --thread NAME.
"""

SERVE_DESCRIPTION = """\
Serve the chat platforms over HTTP until SIGINT or SIGTERM:
  POST /slack/events   Slack events, interactivity and slash commands (when Slack is configured;
                       with SLACK_APP_TOKEN, Socket Mode is used instead of this route)
  POST /api/messages   Microsoft Teams (when Teams is configured)
  GET  /healthz        liveness, always served
  GET  /readyz         readiness: 200 when the database is writable and migrated and every configured
                       surface is connected (Slack auth.test passed, Socket Mode open, Teams credentials
                       loaded), else 503 with the problems as JSON
  GET  /metrics        Prometheus metrics (approvals pending, decisions, runs, LLM, tools, platform
                       API errors, inbox depth, lease takeovers)
A surface whose credentials are missing is skipped and logged; with none configured, only the three
GET routes are served.
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the hand-wrapped description and epilog as written."""


def _version() -> str:
    try:
        return version("countersign")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "unknown"


def _add_log_level(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--log-level",
        default=default,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help=f"how much to log on stderr (default: {default})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``countersign`` (its ``--help`` is the user's manual)."""
    parser = argparse.ArgumentParser(
        prog="countersign",
        description=DESCRIPTION,
        epilog=ENVIRONMENT_HELP
        + "\nRun `countersign chat --help`, `countersign serve --help`, `countersign db --help` or "
        "`countersign audit --help` for details.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"countersign {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="{chat,serve,db,audit}")
    commands.required = True

    chat = commands.add_parser(
        "chat",
        help="chat with the agent in this terminal and approve its tool calls",
        description=CHAT_DESCRIPTION,
        epilog=settings_help(SERVE_ONLY_SETTINGS),
        formatter_class=_Formatter,
    )
    chat.add_argument(
        "--thread",
        default="default",
        metavar="NAME",
        help="conversation to use; the same NAME continues its history and pending approvals after a restart "
        "(default: default)",
    )
    chat.add_argument("--db", type=Path, metavar="PATH", help="SQLite database file (overrides COUNTERSIGN_DB)")
    chat.add_argument(
        "--user",
        metavar="NAME",
        help="your user id in policies, approvals and the audit log (default: your OS user name)",
    )
    _add_log_level(chat, "WARNING")
    chat.set_defaults(handler=_run_chat)

    serve = commands.add_parser(
        "serve",
        help="serve Slack and Teams over HTTP (and /healthz)",
        description=SERVE_DESCRIPTION,
        epilog=ENVIRONMENT_HELP,
        formatter_class=_Formatter,
    )
    serve.add_argument(
        "--host",
        default=None,
        help="address to listen on (default: 0.0.0.0; 127.0.0.1 in Teams anonymous mode unless given)",
    )
    serve.add_argument(
        "--port", type=int, default=3000, help="TCP port to listen on; 0 picks a free one (default: 3000)"
    )
    _add_log_level(serve, "INFO")
    serve.set_defaults(handler=_run_serve)

    from bot.ops_cli import add_commands

    add_commands(commands, _Formatter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``countersign`` with ``argv`` (default: the command line); returns the exit code."""
    args = build_parser().parse_args(argv)
    _importable_working_folder()
    handler: Callable[[argparse.Namespace, Config], int] = args.handler
    try:
        config = Config.from_env()
        # In the terminal chat a traceback would bury the conversation; serve logs keep them for operators.
        configure_logging(
            args.log_level,
            tracebacks=args.command == "serve" or args.log_level == "DEBUG",
            fmt=config.log_format,
            secrets=config.secret_values(),
        )
        return handler(args, config)
    except ConfigError as exc:
        print(f"countersign: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG_ERROR


# Every attribute a LogRecord has by itself; anything else on a record came from ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_PLAIN_VALUE = re.compile(r"[^\s\"'=\\]{1,200}")
CONTEXT_VALUE_LIMIT = 300


def context_value(value: Any) -> str:
    """One ``extra`` value as log text: bare when it is one plain word, else JSON-quoted (escapes included).

    Secrets are masked and long values cut, so a log line stays one safe line.

    >>> context_value("slack"), context_value("no such channel"), context_value(3)
    ('slack', '"no such channel"', '3')
    """
    text = mask_text(value if isinstance(value, str) else str(value))
    if len(text) > CONTEXT_VALUE_LIMIT:
        text = text[: CONTEXT_VALUE_LIMIT - 1] + "…"
    if _PLAIN_VALUE.fullmatch(text):
        return text
    return json.dumps(text, ensure_ascii=False)


class ContextFormatter(logging.Formatter):
    """The message line followed by the record's context (the ``extra=`` fields) as ``key=value`` pairs.

    ``logger.info("surface not configured; skipping", extra={"surface": "teams"})`` prints
    ``… surface not configured; skipping surface=teams``.
    """

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The formatted line plus ``key=value`` for every non-standard attribute of ``record``."""
        line = super().formatMessage(record)
        context = [
            f"{key}={context_value(value)}"
            for key, value in vars(record).items()
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_")
        ]
        return " ".join([line, *context]) if context else line


class ConciseFormatter(ContextFormatter):
    """One line per record: an exception is summarised as ``(Type: message)`` instead of its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record``, folding its exception (if any) into the message line."""
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            record = logging.makeLogRecord(record.__dict__)
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return super().format(record)


def log_formatter(*, tracebacks: bool) -> logging.Formatter:
    """The formatter of every log line: context fields shown; without ``tracebacks`` exceptions take one line."""
    formatter_class = ContextFormatter if tracebacks else ConciseFormatter
    return formatter_class(LOG_FORMAT)


def log_handler(stream: Any, *, tracebacks: bool, fmt: str = "text", secrets: Sequence[str] = ()) -> logging.Handler:
    """A handler writing to ``stream`` in ``fmt`` (``text`` or ``json``), every line with its bound context.

    ``secrets`` (the configured tokens, keys and header values) never appear in a line, tracebacks included.
    """
    from bot.logs import ContextFilter, SecretMaskingFormatter, json_formatter

    handler = logging.StreamHandler(stream)
    formatter = json_formatter(tracebacks=tracebacks) if fmt == "json" else log_formatter(tracebacks=tracebacks)
    handler.setFormatter(SecretMaskingFormatter(formatter, secrets))
    handler.addFilter(ContextFilter())
    return handler


class _CurrentStderr:
    """``sys.stderr`` as it is at each write, not as it was when logging was set up.

    While the chat shows its spinner, rich swaps ``sys.stderr`` for a proxy that prints above the live
    line; a handler holding the original stream would write over the spinner instead.
    """

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


REQUEST_LOGGERS = ("httpx", "httpx2")
"""HTTP clients that log every request at INFO (the model calls): shown at DEBUG only."""


def configure_logging(level: str, *, tracebacks: bool, fmt: str = "text", secrets: Sequence[str] = ()) -> None:
    """Log to stderr at ``level`` as text (see :func:`log_formatter`) or JSON (:func:`bot.logs.json_formatter`).

    Below DEBUG the HTTP clients' line per request is left out (:data:`REQUEST_LOGGERS`): two of a
    conversation's five lines, which say nothing a failed call does not log itself.
    """
    handler = log_handler(_CurrentStderr(), tracebacks=tracebacks, fmt=fmt, secrets=secrets)
    logging.basicConfig(level=level, handlers=[handler])
    threshold = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    for name in REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.NOTSET if threshold <= logging.DEBUG else max(threshold, logging.WARNING)
        )


def _importable_working_folder() -> None:
    """Let COUNTERSIGN_TOOLS name modules in the working folder, as ``python -m`` would (uvicorn does too).

    A console script's ``sys.path`` starts with the script's own folder, not the working folder.
    """
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


# --- chat ---------------------------------------------------------------------------------------


def load_console_runner() -> Callable[..., int]:
    """The console runner registered under ``countersign.console`` / ``chat`` (adapters.console)."""
    for entry in entry_points(group=CONSOLE_GROUP):
        if entry.name == CONSOLE_ENTRY:
            runner: Callable[..., int] = entry.load()
            return runner
    raise ConfigError(
        f"no console adapter is installed (entry point {CONSOLE_GROUP}:{CONSOLE_ENTRY}); reinstall countersign"
    )


def _run_chat(args: argparse.Namespace, config: Config) -> int:
    if args.db is not None:
        config = config.with_overrides(db_path=check_db_path(args.db, "--db"))
    run_chat = load_console_runner()
    return run_chat(config, thread=args.thread, user=args.user)


# --- serve --------------------------------------------------------------------------------------


def _run_serve(args: argparse.Namespace, config: Config) -> int:
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while shutting down
        asyncio.run(serve(config, host=bind_address(config, args.host), port=args.port))
    return 0


def bind_address(config: Config, chosen: str | None) -> str:
    """The address to listen on: the one given, else all interfaces, but only loopback in Teams anonymous mode.

    Anonymous mode accepts requests without a token, so it must not be reachable from the network by accident.
    """
    if chosen:
        return chosen
    return "127.0.0.1" if config.teams_anonymous else "0.0.0.0"


def served_routes(app: Any) -> str:
    """The routes ``app`` really serves, as ``GET /healthz, GET /readyz, …, POST /slack/events``."""
    seen: list[str] = []
    for route in app.router.routes():
        if route.method in {"HEAD", "OPTIONS"}:
            continue
        label = f"{route.method} {route.resource.canonical if route.resource is not None else '?'}"
        if label not in seen:
            seen.append(label)
    return ", ".join(seen)


def check_credentials(config: Config) -> None:
    """Refuse half-set Slack or Teams credentials, naming the missing variable (``ConfigError``)."""
    problems = config.incomplete_credentials()
    if problems:
        raise ConfigError("; ".join(problems))


async def serve(config: Config, *, host: str, port: int, ready: Callable[[str], Any] | None = None) -> None:
    """Run the engine and the HTTP server until SIGINT or SIGTERM, then stop both.

    ``ready`` is called with the base URL once the socket listens (the bound port when ``port`` is 0).
    """
    from aiohttp import web

    from bot import failpoints
    from bot.engine.engine import Engine
    from bot.heap import settle_for_serving
    from bot.instance import stable_instance_id
    from bot.server import ACTIVE_PLUGINS, build_web_app
    from bot.startup import open_when_ready

    check_credentials(config)
    failpoints.arm(config.failpoints)
    if not config.instance_id_set:  # a restart under the same id takes its runs back at once
        config = dataclasses.replace(config, instance_id=stable_instance_id(config))
    # With the database not answering yet, /healthz and /readyz are served meanwhile (bot/startup.py).
    engine, waiting = await open_when_ready(lambda: Engine.create(config), host=host, port=port, ready=ready)
    logger.info("instance id: %s", config.instance_id)
    runner: web.AppRunner | None = None
    try:
        app = await build_web_app(engine, config)
        active = [plugin.name for plugin in app[ACTIVE_PLUGINS]]
        if active:
            logger.info("active surfaces: %s", ", ".join(active))
        else:
            logger.warning(
                "no chat surface is configured (set SLACK_BOT_TOKEN + SLACK_SIGNING_SECRET or SLACK_APP_TOKEN "
                "for Slack, the Teams connection settings for Teams); serving only %s",
                served_routes(app),
            )
        # Only now, with the surfaces registered: recovery owes notices to threads and posts them through them.
        await engine.start()
        await _warn_about_self_approval(engine.storage, config.admins)
        # Start-up objects live for the whole process: keep them out of every later GC pass, which otherwise
        # shows up in the p99 of Slack's 3-second acknowledgements (bench/slack_ack.py); collect less often.
        settle_for_serving()
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        if waiting is not None:  # the stand-in server gives its port to the real one
            port = waiting.port
            await waiting.close()
        site = web.TCPSite(runner, host, port)
        await site.start()
        url = _bound_url(runner, host, port)
        logger.info("listening on %s (%s)", url, served_routes(app))
        if ready is not None and waiting is None:
            ready(url)
        await _wait_for_stop_signal()
        # Keep serving while in-flight work finishes: new messages go to the durable inbox meanwhile, for
        # another process (or this one's next start); then this process's runs are released to the others.
        logger.info("stopping: in-flight work has %gs to finish", config.shutdown_grace_seconds)
        await engine.stop_taking_work(config.shutdown_grace_seconds)
        logger.info("stopping")
    finally:
        if runner is not None:
            await runner.cleanup()
        await engine.stop()


async def _warn_about_self_approval(storage: Any, admins: frozenset[str]) -> None:
    """Say once at start that requesters approve their own calls, when admins are set but no tool has four-eyes."""
    from bot.self_approval import self_approval_warning

    if warning := await self_approval_warning(storage, admins):
        logger.warning(warning)


def _bound_url(runner: Any, host: str, port: int) -> str:
    """``http://host:port`` with the port actually bound (``--port 0`` picks one)."""
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            port = address[1]
            break
    return f"http://{host}:{port}"


async def _wait_for_stop_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


if __name__ == "__main__":
    sys.exit(main())
