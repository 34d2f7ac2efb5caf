"""Configuration: read once from the environment (and a ``.env`` file), validated, passed down.

Nothing deeper in the stack reads the environment; it receives a :class:`Config`.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bot.durations import DurationError, duration_seconds
from bot.group_entries import named_group, platform_group

DEFAULT_TOOLS = ("bot.demo_tools:demo_tools",)
DEFAULT_MODEL = "gpt-4o-mini"
DEFAULT_MAX_ACTIVE_RUNS = 40
"""Runs that work at once per process unless ``COUNTERSIGN_MAX_ACTIVE_RUNS`` says otherwise."""
REPLY_MODES = ("requester", "mention", "all")
TEAMS_USER_VIEWS = ("auto", "on", "off")
"""``COUNTERSIGN_TEAMS_USER_VIEWS``: where Teams approval cards use user-specific views (docs/teams-hosts.md)."""
"""``COUNTERSIGN_REPLY_MODE``: whom the bot listens to in a channel thread (see :mod:`bot.engine.listening`)."""
DEFAULT_SYSTEM_PROMPT = (
    "You are countersign, a careful operations assistant in a team chat. Use the tools to act. "
    "Some tool calls need a human's approval; if a call is rejected, do not retry it unchanged: "
    "explain and ask. Answer briefly."
)


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


def _tool_specs(env: Mapping[str, str]) -> tuple[str, ...]:
    """``COUNTERSIGN_TOOLS``: unset means the demo tools; set but empty is refused (it never silently means them)."""
    raw = env.get("COUNTERSIGN_TOOLS")
    if raw is None:
        return DEFAULT_TOOLS
    specs = _split(raw)
    if not specs:
        raise ConfigError(
            "COUNTERSIGN_TOOLS is set but empty: name module:attribute specs (e.g. mytools:tools), "
            "or unset it for the demo tools"
        )
    return specs


@dataclass(frozen=True)
class Config:
    """Everything countersign can be configured with (see the table in README.md)."""

    db_path: Path = Path("countersign.db")
    database_url: str | None = field(default=None, repr=False)
    """``postgresql://…``: PostgreSQL instead of the SQLite file (``COUNTERSIGN_DATABASE_URL``; may hold a password)."""
    db_pool_size: int = 10
    """``COUNTERSIGN_DB_POOL_SIZE``: at most this many PostgreSQL connections per process (replica)."""
    db_pool_timeout: float = 30.0
    """``COUNTERSIGN_DB_POOL_TIMEOUT``: how long work waits for a pooled PostgreSQL connection before failing."""
    max_active_runs: int | None = None
    """``COUNTERSIGN_MAX_ACTIVE_RUNS``: at most this many runs work at once per process; the others wait their turn
    (:mod:`bot.engine.admission`). ``None``: :attr:`active_runs_limit`'s default."""
    tool_specs: tuple[str, ...] = DEFAULT_TOOLS
    mcp_servers: tuple[Any, ...] = field(default=(), repr=False)
    """``COUNTERSIGN_MCP_CONFIG``: the MCP servers (``bot.mcp.MCPServerConfig``), their tools beside the others."""
    admins: frozenset[str] = frozenset()
    model: str = DEFAULT_MODEL
    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    llm_timeout_seconds: float = 60.0
    llm_max_retries: int = 2
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """``COUNTERSIGN_SYSTEM_PROMPT``: the model's instructions (text, or ``@file`` read at start)."""
    generation_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """``COUNTERSIGN_GENERATION_KWARGS``: extra chat-completion parameters (temperature, max_tokens, …)."""
    max_agent_steps: int = 100
    """``COUNTERSIGN_MAX_STEPS``: model calls one run may make before it stops unfinished."""
    llm_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    """``COUNTERSIGN_LLM_HEADERS``: extra HTTP headers for every model call (gateways; may hold secrets)."""
    stream_update_seconds: float = 1.0
    """``COUNTERSIGN_STREAM_UPDATE_SECONDS``: a streamed answer's message is updated at most this often."""
    history_last_k: int = 30
    memory_notes: bool = True
    """Answers that drew on a memory end with a short note saying so ("from channel memory: …")."""
    default_ttl_seconds: int = 24 * 3600
    sweep_interval_seconds: float = 30.0
    """``COUNTERSIGN_SWEEP_SECONDS``: the interval of the expiry sweep, the recovery scan and outbox retries."""
    instance_id: str = field(default_factory=lambda: default_instance_id())
    """``COUNTERSIGN_INSTANCE_ID``: this process's name as the owner of the runs it works on."""
    instance_id_set: bool = False
    """Whether ``COUNTERSIGN_INSTANCE_ID`` was set; if not, ``serve`` takes a stable one (:mod:`bot.instance`)."""
    lease_seconds: float = 30.0
    """``COUNTERSIGN_LEASE_SECONDS``: how long a run stays owned without a heartbeat before recovery may take it."""
    heartbeat_seconds: float = 10.0
    """``COUNTERSIGN_HEARTBEAT_SECONDS``: how often the owner renews its leases (less than the lease)."""
    shutdown_grace_seconds: float = 20.0
    """``COUNTERSIGN_SHUTDOWN_GRACE_SECONDS``: how long a stopping process lets in-flight work finish."""
    slack_bot_token: str | None = field(default=None, repr=False)
    slack_signing_secret: str | None = field(default=None, repr=False)
    slack_app_token: str | None = field(default=None, repr=False)
    slack_api_url: str | None = None
    teams_anonymous: bool = False
    teams_settings: Mapping[str, str] = field(default_factory=dict, repr=False)
    teams_user_views: str = "auto"
    """``COUNTERSIGN_TEAMS_USER_VIEWS``: ``auto`` (only in Teams conversations that support them), ``on``, ``off``."""
    """The Microsoft 365 Agents SDK's own connection variables (``CONNECTIONS__…``), passed through."""
    remind_at: float = 0.5
    """``COUNTERSIGN_REMIND_AT``: the fraction of an approval's TTL after which approvers who have not answered
    are reminded, once (0 turns reminders off)."""
    breakglass_limit: int = 3
    """``COUNTERSIGN_BREAKGLASS_LIMIT``: break-glass decisions allowed per person per 24 h (issue 31; 0: none)."""
    breakglass_channel: str | None = None
    """``COUNTERSIGN_BREAKGLASS_CHANNEL``: the channel id every break-glass is posted to (unset: no post)."""
    preview_timeout_seconds: float = 10.0
    """``COUNTERSIGN_PREVIEW_TIMEOUT``: how long a tool's preview may take, at a pause and before the run (issue 30)."""
    reply_mode: str = "requester"
    """``COUNTERSIGN_REPLY_MODE``: ``requester`` (the run's requester, or anyone who mentions the bot),
    ``mention`` (only a mention) or ``all`` (every reply in a thread the bot takes part in)."""
    failpoints: str = ""
    """Crash-test failpoint names (``COUNTERSIGN_FAILPOINT``, comma-separated; see :mod:`bot.failpoints`)."""
    log_format: str = "text"
    """``COUNTERSIGN_LOG_FORMAT``: ``text`` (a line with ``key=value`` context) or ``json`` (one object a line)."""
    snapshot_retention_seconds: int | None = 7 * 86400
    """``COUNTERSIGN_SNAPSHOT_RETENTION``: ended runs drop their snapshots after this long (``None``: never)."""
    retention_seconds: int | None = None
    """``COUNTERSIGN_RETENTION_DAYS`` in seconds: ended runs, approvals, ledger, idle threads pruned after it."""
    audit_retention_seconds: int | None = None
    """``COUNTERSIGN_AUDIT_RETENTION_DAYS`` in seconds: audit entries pruned after it (``None``: kept forever)."""
    audit_key: bytes | None = field(default=None, repr=False)
    """``COUNTERSIGN_AUDIT_KEY`` or ``COUNTERSIGN_AUDIT_KEY_FILE``'s content: signs the audit log (docs/audit.md)."""
    audit_channel: str | None = None
    """``COUNTERSIGN_AUDIT_CHANNEL``: where the audit log's head is posted once a day (``slack:C…``, ``console:…``)."""
    db_connect_timeout: float = 10.0
    """``COUNTERSIGN_DB_CONNECT_TIMEOUT``: how long ``chat`` and the ``db``/``audit`` commands wait for PostgreSQL."""

    @property
    def active_runs_limit(self) -> int:
        """How many runs work at once per process: ``COUNTERSIGN_MAX_ACTIVE_RUNS``, else 40, whatever the pool.

        The bound keeps a burst's hundreds of runs from crowding the event loop that also acknowledges the
        platform's events. A run spends most of its time waiting for the model, not the database, so the pool
        is no guide: bursts of 500 through ``serve`` (docs/scaling.md) kept the ack p99 under 2 s with 40 places
        on SQLite and PostgreSQL, and carried 2.5 times the conversations per second of 10 places.
        """
        return self.max_active_runs or DEFAULT_MAX_ACTIVE_RUNS

    @property
    def llm_configured(self) -> bool:
        """Whether a real OpenAI-compatible endpoint is configured (otherwise the offline demo model)."""
        return bool(self.openai_api_key or self.openai_base_url)

    @property
    def slack_configured(self) -> bool:
        """Whether Slack credentials are present."""
        return bool(self.slack_bot_token and (self.slack_signing_secret or self.slack_app_token))

    @property
    def teams_configured(self) -> bool:
        """Whether Teams can be served (credentials, or explicit anonymous mode for local testing)."""
        return self.teams_anonymous or any(k.upper().endswith("CLIENTID") for k in self.teams_settings)

    def incomplete_credentials(self) -> list[str]:
        """One sentence per surface whose credentials are only partly set, naming what is missing."""
        problems: list[str] = []
        slack_extra = [
            n
            for n, v in (("SLACK_SIGNING_SECRET", self.slack_signing_secret), ("SLACK_APP_TOKEN", self.slack_app_token))
            if v
        ]
        if self.slack_bot_token and not slack_extra:
            problems.append(
                "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET (HTTP mode) nor SLACK_APP_TOKEN "
                "(Socket Mode) is"
            )
        elif slack_extra and not self.slack_bot_token:
            problems.append(
                f"{' and '.join(slack_extra)} {'is' if len(slack_extra) == 1 else 'are'} set but SLACK_BOT_TOKEN is not"
            )
        upper = {k.upper(): v for k, v in self.teams_settings.items() if v}
        prefix = "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__"
        if self.teams_anonymous and any(k.endswith("CLIENTID") for k in upper):
            problems.append(
                "COUNTERSIGN_TEAMS_ANONYMOUS=1 cannot be used with Teams credentials "
                f"({prefix}CLIENTID is set): anonymous mode lets anyone act as any user; unset one of them"
            )
        elif any(k.endswith("CLIENTID") for k in upper):
            secret_based = upper.get(f"{prefix}AUTHTYPE", "ClientSecret").lower() == "clientsecret"
            needed = ["TENANTID"] + (["CLIENTSECRET"] if secret_based else [])
            missing = [f"{prefix}{name}" for name in needed if f"{prefix}{name}" not in upper]
            if missing:
                verb = "is" if len(missing) == 1 else "are"
                problems.append(f"Teams: {prefix}CLIENTID is set but {' and '.join(missing)} {verb} not")
        return problems

    def secret_values(self) -> list[str]:
        """Every configured secret value (tokens, keys, passwords, LLM header values), to keep out of logs."""
        from urllib.parse import urlsplit

        from bot.redaction import is_secret_key

        values = [self.openai_api_key, self.slack_bot_token, self.slack_signing_secret, self.slack_app_token]
        for header_value in self.llm_headers.values():
            values += [header_value, *header_value.split()[1:]]  # "Bearer abc": the token alone may be echoed
        values += [v for k, v in self.teams_settings.items() if is_secret_key(k) and not k.upper().endswith("AUTHTYPE")]
        if self.database_url:
            values.append(urlsplit(self.database_url).password)
        if self.audit_key:
            values.append(self.audit_key.decode("utf-8", "replace"))
        return [v for v in values if v]

    def with_overrides(self, **changes: Any) -> Config:
        """A copy with some fields changed (tests, CLI flags)."""
        return replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, dotenv_path: str | Path | None = ".env") -> Config:
        """Read the configuration from ``environ`` (default: ``os.environ`` plus a ``.env`` file)."""
        env: dict[str, str] = {}
        if environ is None:
            if dotenv_path and Path(dotenv_path).is_file():
                from dotenv import dotenv_values

                env.update({k: v for k, v in dotenv_values(dotenv_path).items() if v is not None})
            env.update(os.environ)
        else:
            env.update(environ)
        database_url = _database_url(env, "COUNTERSIGN_DATABASE_URL")
        db_path = Path(env.get("COUNTERSIGN_DB") or "countersign.db")
        return cls(
            # With PostgreSQL no SQLite file is opened, so its path is not checked.
            db_path=db_path if database_url else check_db_path(db_path, "COUNTERSIGN_DB"),
            database_url=database_url,
            db_pool_size=_int(env, "COUNTERSIGN_DB_POOL_SIZE", 10, minimum=2),
            db_pool_timeout=_db_pool_timeout(env),
            max_active_runs=_int(env, "COUNTERSIGN_MAX_ACTIVE_RUNS", 0, minimum=1) or None,
            tool_specs=_tool_specs(env),
            mcp_servers=_mcp_servers(env),
            admins=_admins(env.get("COUNTERSIGN_ADMINS")),
            model=env.get("COUNTERSIGN_MODEL") or DEFAULT_MODEL,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            llm_timeout_seconds=_positive_float(env, "COUNTERSIGN_LLM_TIMEOUT", 60.0),
            llm_max_retries=_int(env, "COUNTERSIGN_LLM_RETRIES", 2, minimum=0),
            history_last_k=_int(env, "COUNTERSIGN_HISTORY_LAST_K", 30, minimum=1),
            memory_notes=_flag(env, "COUNTERSIGN_MEMORY_NOTES", default=True),
            system_prompt=_system_prompt(env, "COUNTERSIGN_SYSTEM_PROMPT"),
            generation_kwargs=_generation_kwargs(env, "COUNTERSIGN_GENERATION_KWARGS"),
            max_agent_steps=_int(env, "COUNTERSIGN_MAX_STEPS", 100, minimum=1, maximum=1000),
            llm_headers=_llm_headers(env, "COUNTERSIGN_LLM_HEADERS"),
            stream_update_seconds=_positive_float(env, "COUNTERSIGN_STREAM_UPDATE_SECONDS", 1.0),
            default_ttl_seconds=_default_ttl(env),
            slack_bot_token=env.get("SLACK_BOT_TOKEN") or None,
            slack_signing_secret=env.get("SLACK_SIGNING_SECRET") or None,
            slack_app_token=env.get("SLACK_APP_TOKEN") or None,
            slack_api_url=env.get("COUNTERSIGN_SLACK_API_URL") or None,
            teams_anonymous=_flag(env, "COUNTERSIGN_TEAMS_ANONYMOUS"),
            teams_settings={k: v for k, v in env.items() if k.startswith("CONNECTIONS__")},
            teams_user_views=_choice(env, "COUNTERSIGN_TEAMS_USER_VIEWS", TEAMS_USER_VIEWS),
            reply_mode=_choice(env, "COUNTERSIGN_REPLY_MODE", REPLY_MODES),
            remind_at=_fraction(env, "COUNTERSIGN_REMIND_AT", 0.5),
            breakglass_limit=_int(env, "COUNTERSIGN_BREAKGLASS_LIMIT", 3, minimum=0, maximum=1000),
            breakglass_channel=(env.get("COUNTERSIGN_BREAKGLASS_CHANNEL") or "").strip() or None,
            preview_timeout_seconds=_preview_timeout(env),
            failpoints=(env.get("COUNTERSIGN_FAILPOINT") or "").strip(),
            **_operations_settings(env),
            **_audit_settings(env),
            **_lifecycle_settings(env),
        )

    def load_tools(self) -> list[Any]:
        """Import every ``module:attribute`` of :attr:`tool_specs` (a Tool, a list of Tools, or a Toolset)."""
        from bot.tools import Tool, Toolset, flatten_tools, import_attribute

        loaded: list[Tool | Toolset] = []
        for spec in self.tool_specs:
            try:
                value = import_attribute(spec)
            except (ImportError, AttributeError, ValueError) as exc:
                raise ConfigError(f"COUNTERSIGN_TOOLS: cannot import {spec!r}: {exc}") from exc
            if isinstance(value, Tool | Toolset):
                loaded.append(value)
            elif isinstance(value, list | tuple) and all(isinstance(v, Tool | Toolset) for v in value):
                loaded.extend(value)
            else:
                raise ConfigError(f"COUNTERSIGN_TOOLS: {spec!r} is not a Tool, a list of Tools or a Toolset")
        try:
            return flatten_tools(loaded)
        except ValueError as exc:
            raise ConfigError(f"COUNTERSIGN_TOOLS: {exc}") from exc

    def build_generator(self) -> Any:
        """The configured LLM, or the offline demo model when none is configured."""
        if not self.llm_configured:
            from bot.llm import OfflineDemoChatGenerator

            return OfflineDemoChatGenerator()
        # Imported only here: the openai client takes over a second to import, which the offline demo
        # (and `countersign chat` start-up with it) must not pay.
        from bot.llm.openai_generator import OpenAIChatGenerator

        return OpenAIChatGenerator(
            model=self.model,
            api_key=self.openai_api_key,
            api_base_url=self.openai_base_url,
            generation_kwargs=dict(self.generation_kwargs),
            timeout=self.llm_timeout_seconds,
            max_retries=self.llm_max_retries,
            default_headers=dict(self.llm_headers),
        )


def _mcp_servers(env: Mapping[str, str]) -> tuple[Any, ...]:
    """``COUNTERSIGN_MCP_CONFIG`` read and checked now, so a bad file stops start-up in one line."""
    from bot.mcp.config import MCPConfigError, load_mcp_config

    try:
        return tuple(load_mcp_config(env))
    except MCPConfigError as exc:
        raise ConfigError(str(exc)) from None


def check_db_path(path: Path, name: str) -> Path:
    """``path`` if a SQLite database can live there; otherwise a :class:`ConfigError` naming ``name``.

    ``name`` is the variable or flag the path came from (``COUNTERSIGN_DB``, ``--db``). A missing
    folder, a folder given as the file, a read-only file or folder, and a file that is not a SQLite
    database are refused here, at start, instead of as a traceback when storage opens.

    >>> check_db_path(Path("/no/such/folder/cs.db"), "COUNTERSIGN_DB")
    Traceback (most recent call last):
    bot.config.ConfigError: COUNTERSIGN_DB: the folder /no/such/folder does not exist (for /no/such/folder/cs.db)
    """
    if path.is_dir():
        raise ConfigError(f"{name}: {path} is a folder; name a database file in it, e.g. {path / 'countersign.db'}")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise ConfigError(f"{name}: the folder {folder} {what} (for {path})")
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(f"{name}: {path} is read-only; countersign must write to its database")
        _probe_sqlite(path, name)
    elif not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{name}: cannot create {path}: the folder {folder} is read-only")
    return path


def _probe_sqlite(path: Path, name: str) -> None:
    """Open an existing file as SQLite (read-write, never creating) and read its header."""
    uri = f"file:{quote(str(path.resolve()))}?mode=rw"
    try:
        connection = sqlite3.connect(uri, uri=True, timeout=1)
        try:
            connection.execute("PRAGMA schema_version").fetchone()
        finally:
            connection.close()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):  # another process is writing: the file is a database
            return
        raise ConfigError(f"{name}: cannot open {path} as a SQLite database ({exc})") from exc
    except sqlite3.DatabaseError as exc:
        raise ConfigError(f"{name}: {path} is not a SQLite database ({exc})") from exc


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in re.split(r"[,\s]+", value or "") if part.strip())


def _admins(raw: str | None) -> frozenset[str]:
    """``COUNTERSIGN_ADMINS``: people's ids, ``@name`` for a named approver group, ``<!subteam^S…>`` (or
    ``subteam^S…``) for a Slack user group."""
    entries = set()
    for word in _split(raw):
        usergroup = re.match(r"^<?!?subteam\^([A-Za-z0-9]+)(?:\|[^>]*)?>?$", word)
        if usergroup:
            entries.add(platform_group(usergroup.group(1)))
        elif word.startswith("@") and len(word) > 1:
            entries.add(named_group(word))
        else:
            entries.add(word)
    return frozenset(entries)


def _int(env: Mapping[str, str], name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from exc
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{name} must be at most {maximum}, got {value}")
    return value


MAX_SYSTEM_PROMPT_CHARS = 100_000
RESERVED_GENERATION_KWARGS = frozenset({"model", "messages", "tools", "stream", "stream_options", "n"})
"""Chat-completion parameters countersign sets itself: a setting may not override them."""
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header name (RFC 9110 token)."""


def _system_prompt(env: Mapping[str, str], name: str) -> str:
    """The system prompt: the value itself, or with a leading ``@`` the UTF-8 text of that file."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return DEFAULT_SYSTEM_PROMPT
    text = raw
    if raw.startswith("@"):
        path = Path(raw[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigError(f"{name}: the file {path} does not exist") from None
        except IsADirectoryError:
            raise ConfigError(f"{name}: {path} is a folder, not a file") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{name}: {path} is not UTF-8 text") from None
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read {path} ({exc.strerror or exc})") from None
        if not text.strip():
            raise ConfigError(f"{name}: the file {path} is empty")
    if len(text) > MAX_SYSTEM_PROMPT_CHARS:
        raise ConfigError(f"{name} is {len(text)} characters long; at most {MAX_SYSTEM_PROMPT_CHARS} are allowed")
    return text.strip()


def _json_object(env: Mapping[str, str], name: str, example: str) -> dict[str, Any]:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        # The position only: the value may hold a secret (a gateway key).
        raise ConfigError(
            f"{name} is not valid JSON (line {getattr(exc, 'lineno', '?')}, "
            f"column {getattr(exc, 'colno', '?')}); expected an object like {example}"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be a JSON object like {example}, got a {type(value).__name__}")
    return value


def _generation_kwargs(env: Mapping[str, str], name: str) -> dict[str, Any]:
    """Extra chat-completion parameters; refused: the ones countersign sets, and a type the client would refuse."""
    value = _json_object(env, name, '{"temperature": 0.2, "max_tokens": 800}')
    reserved = sorted(RESERVED_GENERATION_KWARGS & set(value))
    if reserved:
        raise ConfigError(f"{name}: {', '.join(reserved)} cannot be set here (countersign sets them itself)")
    if value:
        # The types come from the openai client's own signature (imported only when there is something to check).
        from bot.llm.openai_params import generation_kwargs_problem

        problem = generation_kwargs_problem(value)
        if problem:
            raise ConfigError(f"{name}: {problem}")
    return value


def _llm_headers(env: Mapping[str, str], name: str) -> dict[str, str]:
    """Extra HTTP headers for model calls; names are checked, values never echoed (they may be secrets)."""
    value = _json_object(env, name, '{"X-Gateway-Key": "…"}')
    headers: dict[str, str] = {}
    for key, item in value.items():
        if not _HEADER_NAME.match(key):
            raise ConfigError(f"{name}: {key[:60]!r} is not a valid HTTP header name")
        if not isinstance(item, str):
            raise ConfigError(f"{name}: the value of {key} must be a string, got a {type(item).__name__}")
        if not item.isprintable():  # line breaks and control characters would split the request
            raise ConfigError(f"{name}: the value of {key} holds line breaks or control characters")
        headers[key] = item
    return headers


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be more than 0 seconds, got {raw!r}")
    return value


def default_instance_id() -> str:
    """``hostname-pid-random``: unique per process, readable in logs and in the ``runs.owner`` column."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def _seconds(env: Mapping[str, str], name: str, default: float, *, allow_zero: bool = False) -> float:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number of seconds, got {raw!r}") from exc
    if not (value > 0 or (allow_zero and value == 0)) or value == float("inf"):
        kind = "zero or a positive" if allow_zero else "a positive"
        raise ConfigError(f"{name} must be {kind} number of seconds, got {raw!r}")
    return value


MAX_RETENTION_SECONDS = 3650 * 86400
"""The longest retention period a setting or ``db prune --older-than`` takes (ten years)."""

RENAMED = {"COUNTERSIGN_DEFAULT_TTL_SECONDS": "COUNTERSIGN_DEFAULT_TTL"}
"""Variables that were renamed: setting the old name is an error, never silently ignored."""


def _default_ttl(env: Mapping[str, str]) -> int:
    """``COUNTERSIGN_DEFAULT_TTL``: a duration as the ``ttl`` command takes it (``30m``, ``4h``, ``2d``, seconds)."""
    for old, new in RENAMED.items():
        if old in env:
            raise ConfigError(f"{old} was renamed: use {new} (e.g. {new}=24h; a plain number still means seconds)")
    raw = env.get("COUNTERSIGN_DEFAULT_TTL")
    if not raw:
        return 24 * 3600
    # The ttl command's parser (one syntax, one bound).
    try:
        return duration_seconds(raw)
    except DurationError as exc:
        raise ConfigError(f"COUNTERSIGN_DEFAULT_TTL: {exc}") from None


MAX_DB_POOL_TIMEOUT_SECONDS = 3600


def _db_pool_timeout(env: Mapping[str, str]) -> float:
    """``COUNTERSIGN_DB_POOL_TIMEOUT``: a duration (``30s``, ``2m``, plain seconds), at most an hour; default 30 s."""
    raw = env.get("COUNTERSIGN_DB_POOL_TIMEOUT")
    if not raw:
        return 30.0
    try:
        return float(duration_seconds(raw, maximum=MAX_DB_POOL_TIMEOUT_SECONDS, what="A pool timeout"))
    except DurationError as exc:
        raise ConfigError(f"COUNTERSIGN_DB_POOL_TIMEOUT: {exc}") from None


def _database_url(env: Mapping[str, str], name: str) -> str | None:
    raw = (env.get(name) or "").strip()
    if not raw:
        return None
    if not raw.startswith(("postgresql://", "postgres://")):
        # Never echo the value: a URL may carry a password.
        raise ConfigError(f"{name} must be a postgresql:// URL (unset it to use the SQLite file COUNTERSIGN_DB)")
    return raw


def _lifecycle_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """Instance id, lease, heartbeat, shutdown grace and sweep interval (the run lifecycle's settings)."""
    lease = _seconds(env, "COUNTERSIGN_LEASE_SECONDS", 30.0)
    heartbeat = _seconds(env, "COUNTERSIGN_HEARTBEAT_SECONDS", 10.0)
    if heartbeat >= lease:
        raise ConfigError(
            f"COUNTERSIGN_HEARTBEAT_SECONDS ({heartbeat:g}) must be less than COUNTERSIGN_LEASE_SECONDS ({lease:g}), "
            "or leases expire while their owner still works"
        )
    instance = (env.get("COUNTERSIGN_INSTANCE_ID") or "").strip()
    if instance and (len(instance) > 200 or not instance.isprintable()):
        raise ConfigError("COUNTERSIGN_INSTANCE_ID must be printable and at most 200 characters")
    settings: dict[str, Any] = {
        "lease_seconds": lease,
        "heartbeat_seconds": heartbeat,
        "shutdown_grace_seconds": _seconds(env, "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS", 20.0, allow_zero=True),
        "sweep_interval_seconds": _seconds(env, "COUNTERSIGN_SWEEP_SECONDS", 30.0),
    }
    if instance:
        settings["instance_id"] = instance
        settings["instance_id_set"] = True
    return settings


def _preview_timeout(env: Mapping[str, str]) -> float:
    """``COUNTERSIGN_PREVIEW_TIMEOUT`` (the duration syntax, ``10s`` by default)."""
    from bot.hitl.previews import preview_timeout

    try:
        return preview_timeout(env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _fraction(env: Mapping[str, str], name: str, default: float) -> float:
    """A number from 0 (off) to below 1."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise ConfigError(f"{name} must be a fraction of the TTL from 0 (off) to below 1, e.g. 0.5; got {raw[:40]!r}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices`` (case-insensitive); the first when unset."""
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return choices[0]
    if raw not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw[:40]!r}")
    return raw


def _operations_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """Log format and retention (the operations settings)."""
    log_format = _choice(env, "COUNTERSIGN_LOG_FORMAT", ("text", "json"))
    snapshot_retention: int | None = 7 * 86400
    raw = (env.get("COUNTERSIGN_SNAPSHOT_RETENTION") or "").strip()
    if raw.lower() in ("never", "off"):
        snapshot_retention = None
    elif raw:
        try:
            snapshot_retention = duration_seconds(raw, maximum=MAX_RETENTION_SECONDS, what="A retention period")
        except DurationError as exc:
            raise ConfigError(f"COUNTERSIGN_SNAPSHOT_RETENTION: {exc} (or never)") from None
    days = _int(env, "COUNTERSIGN_RETENTION_DAYS", 0, minimum=0)
    audit_days = _int(env, "COUNTERSIGN_AUDIT_RETENTION_DAYS", 0, minimum=0)
    return {
        "log_format": log_format,
        "snapshot_retention_seconds": snapshot_retention,
        "retention_seconds": days * 86400 or None,
        "audit_retention_seconds": audit_days * 86400 or None,
    }


MIN_AUDIT_KEY_BYTES = 16


def _audit_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The audit key (from the variable or a file, never both), the head's channel and the connect timeout."""
    text = env.get("COUNTERSIGN_AUDIT_KEY") or ""
    file = (env.get("COUNTERSIGN_AUDIT_KEY_FILE") or "").strip()
    if text and file:
        raise ConfigError("set COUNTERSIGN_AUDIT_KEY or COUNTERSIGN_AUDIT_KEY_FILE, not both")
    key: bytes | None = text.strip().encode() if text.strip() else None
    name = "COUNTERSIGN_AUDIT_KEY"
    if file:
        name = "COUNTERSIGN_AUDIT_KEY_FILE"
        try:
            key = Path(file).expanduser().read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"{name}: cannot read {file} ({exc.strerror or exc})") from None
    if key is not None and len(key) < MIN_AUDIT_KEY_BYTES:
        raise ConfigError(f"{name}: the key must be at least {MIN_AUDIT_KEY_BYTES} bytes (e.g. openssl rand -hex 32)")
    channel = (env.get("COUNTERSIGN_AUDIT_CHANNEL") or "").strip() or None
    if channel is not None and (channel.count(":") < 2 or "" in channel.split(":")[:3]):
        raise ConfigError("COUNTERSIGN_AUDIT_CHANNEL must be platform:workspace:channel[:thread], e.g. slack:T1:C123")
    return {
        "audit_key": key,
        "audit_channel": channel,
        "db_connect_timeout": _seconds(env, "COUNTERSIGN_DB_CONNECT_TIMEOUT", 10.0),
    }


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{name} must be 1 or 0, got {raw!r}")
