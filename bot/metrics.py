"""What countersign tells an operator about itself: the :class:`Observer` the engine and adapters report to.

The engine, the agent's ledger and the adapters call one small interface (:class:`Observer`) when
something worth counting happens; :class:`PrometheusObserver` turns those calls into Prometheus
metrics in a registry of its own (one per engine, so tests and several engines in one process never
share counters), served by ``GET /metrics``. Gauges that describe the database (approvals pending,
inbox depth) are read from storage when scraped, so every replica reports the same truth.

Labels are bounded on purpose: tool names (a configured set), actions, outcomes that are exception
class names or fixed words, platforms, run statuses. Never a user id, a thread id or an argument.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST as PROMETHEUS_CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["PROMETHEUS_CONTENT_TYPE", "NullObserver", "Observer", "PrometheusObserver"]

DECISION_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 3 * 86400, 7 * 86400)
"""Pause → decision, in seconds: people answer in seconds or in days."""

LLM_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
TOOL_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
PLATFORM_ERROR_KINDS = ("rate_limited", "server_error", "api_error", "connection")
"""The ``kind`` label of platform API errors (see :meth:`Observer.platform_api_error`)."""


class Observer(Protocol):
    """Receives the events operators count. Every method is cheap, synchronous and never raises."""

    def llm_call(self, seconds: float, *, error: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        """One call to the model finished (``error``: the exception class name when it failed)."""
        ...

    def tool_executed(self, tool: str, seconds: float, *, ok: bool) -> None:
        """One tool call ran (after any approval); ``ok`` is false when it raised or was refused by validation."""
        ...

    def decision(self, action: str, outcome: str, *, waited_seconds: float | None = None) -> None:
        """A decision was attempted: ``outcome`` is ``recorded`` or the refusal's class name.

        ``waited_seconds`` (pause → decision) is given for recorded decisions.
        """
        ...

    def run_ended(self, status: str) -> None:
        """A run reached a final status (``finished``, ``failed``, ``superseded``, …)."""
        ...

    def platform_api_error(self, platform: str, kind: str) -> None:
        """A chat platform's API answered with an error; ``kind`` is one of :data:`PLATFORM_ERROR_KINDS`."""
        ...

    def lease_takeover(self) -> None:
        """This process took over a run whose owner stopped renewing its lease."""
        ...


class NullObserver:
    """An :class:`Observer` that records nothing."""

    def llm_call(self, seconds: float, *, error: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        """Ignore."""

    def tool_executed(self, tool: str, seconds: float, *, ok: bool) -> None:
        """Ignore."""

    def decision(self, action: str, outcome: str, *, waited_seconds: float | None = None) -> None:
        """Ignore."""

    def run_ended(self, status: str) -> None:
        """Ignore."""

    def platform_api_error(self, platform: str, kind: str) -> None:
        """Ignore."""

    def lease_takeover(self) -> None:
        """Ignore."""


class PrometheusObserver:
    """An :class:`Observer` backed by ``prometheus_client`` metrics in its own :class:`CollectorRegistry`.

    >>> observer = PrometheusObserver()
    >>> observer.run_ended("finished")
    >>> b"countersign_runs_total" in observer.exposition()
    True
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._pending_tools: set[str] = set()
        self._children: dict[tuple[Any, ...], Any] = {}
        r = self.registry
        self.approvals_pending = Gauge(
            "countersign_approvals_pending", "Approvals waiting for a decision, by tool", ["tool"], registry=r
        )
        self.teams_anonymous = Gauge(
            "countersign_teams_anonymous",
            "1 while Teams requests are accepted without a token (COUNTERSIGN_TEAMS_ANONYMOUS)",
            registry=r,
        )
        self.inbox_depth = Gauge(
            "countersign_inbox_depth", "Messages waiting in thread inboxes for their thread to be free", registry=r
        )
        self.decisions = Counter(
            "countersign_decisions", "Decisions attempted, by action and outcome", ["action", "outcome"], registry=r
        )
        self.decision_wait = Histogram(
            "countersign_decision_wait_seconds",
            "Time from a pause to its decision",
            buckets=DECISION_BUCKETS,
            registry=r,
        )
        self.runs = Counter("countersign_runs", "Runs that ended, by final status", ["status"], registry=r)
        self.llm_latency = Histogram(
            "countersign_llm_latency_seconds",
            "Duration of model calls (retries included)",
            buckets=LLM_BUCKETS,
            registry=r,
        )
        self.llm_errors = Counter("countersign_llm_errors", "Model calls that failed, by error", ["error"], registry=r)
        self.llm_tokens = Counter("countersign_llm_tokens", "Tokens used, by kind", ["kind"], registry=r)
        self.tool_executions = Counter(
            "countersign_tool_executions", "Tool calls executed, by tool", ["tool"], registry=r
        )
        self.tool_failures = Counter(
            "countersign_tool_failures", "Tool calls that failed, by tool", ["tool"], registry=r
        )
        self.tool_duration = Histogram(
            "countersign_tool_duration_seconds",
            "Duration of tool calls, by tool",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=r,
        )
        self.platform_errors = Counter(
            "countersign_platform_api_errors",
            "Chat platform API errors, by platform and kind",
            ["platform", "kind"],
            registry=r,
        )
        self.platform_rate_limits = Counter(
            "countersign_platform_rate_limits",
            "Chat platform API calls answered 429, by platform",
            ["platform"],
            registry=r,
        )
        self.lease_takeovers = Counter(
            "countersign_lease_takeovers", "Runs this process took over from a stopped owner", registry=r
        )
        self.db_pool_waits = Counter(
            "countersign_db_pool_waits", "Requests that waited for a pooled PostgreSQL connection", registry=r
        )
        self.db_pool_wait_seconds = Counter(
            "countersign_db_pool_wait_seconds", "Time requests spent waiting for a pooled connection", registry=r
        )
        self.db_pool_timeouts = Counter(
            "countersign_db_pool_timeouts",
            "Requests that gave up waiting for a pooled connection (COUNTERSIGN_DB_POOL_TIMEOUT)",
            registry=r,
        )
        self.db_pool_connections = Gauge(
            "countersign_db_pool_connections",
            "Connections of this process's PostgreSQL pool, by state",
            ["state"],
            registry=r,
        )
        self.db_pool_waiting = Gauge(
            "countersign_db_pool_waiting", "Requests waiting for a pooled PostgreSQL connection now", registry=r
        )
        self._pool_seen: dict[str, float] = {}
        self.runs_admitted = Gauge(
            "countersign_runs_admitted",
            "Runs of this process working now (at most COUNTERSIGN_MAX_ACTIVE_RUNS)",
            registry=r,
        )
        self.runs_waiting_turn = Gauge(
            "countersign_runs_waiting_turn", "Runs of this process waiting for their turn to work now", registry=r
        )

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, looked up once: the client checks and locks on every ``labels`` call,
        and the engine counts several series per conversation. (No series is ever removed here.)"""
        key = (metric, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def llm_call(self, seconds: float, *, error: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        """Latency, errors and tokens of one model call."""
        self.llm_latency.observe(seconds)
        if error is not None:
            self._child(self.llm_errors, error).inc()
        if prompt_tokens:
            self._child(self.llm_tokens, "prompt").inc(prompt_tokens)
        if completion_tokens:
            self._child(self.llm_tokens, "completion").inc(completion_tokens)

    def tool_executed(self, tool: str, seconds: float, *, ok: bool) -> None:
        """Executions, failures and duration of one tool call."""
        self._child(self.tool_executions, tool).inc()
        self._child(self.tool_duration, tool).observe(seconds)
        if not ok:
            self._child(self.tool_failures, tool).inc()

    def decision(self, action: str, outcome: str, *, waited_seconds: float | None = None) -> None:
        """Count a decision; a recorded one also observes how long it waited."""
        self._child(self.decisions, action, outcome).inc()
        if waited_seconds is not None:
            self.decision_wait.observe(max(0.0, waited_seconds))

    def run_ended(self, status: str) -> None:
        """Count a run by its final status."""
        self._child(self.runs, status).inc()

    def platform_api_error(self, platform: str, kind: str) -> None:
        """Count a platform API error; a rate limit counts in both series."""
        kind = kind if kind in PLATFORM_ERROR_KINDS else "api_error"
        self.platform_errors.labels(platform=platform, kind=kind).inc()
        if kind == "rate_limited":
            self.platform_rate_limits.labels(platform=platform).inc()

    def lease_takeover(self) -> None:
        """Count a takeover."""
        self.lease_takeovers.inc()

    def set_database_gauges(self, pending_by_tool: Mapping[str, int], inbox_depth: int) -> None:
        """Set the gauges read from storage at scrape time (tools with nothing pending drop to 0)."""
        # A tool seen before with nothing pending now reads 0, not its last count.
        self._pending_tools.update(pending_by_tool)
        for tool in self._pending_tools:
            self.approvals_pending.labels(tool=tool).set(pending_by_tool.get(tool, 0))
        self.inbox_depth.set(inbox_depth)

    def set_pool_stats(self, stats: Mapping[str, int]) -> None:
        """Read the PostgreSQL pool's own counters (psycopg_pool's ``get_stats()`` names) at scrape time."""
        for key, counter, scale in (
            ("requests_queued", self.db_pool_waits, 1.0),
            ("requests_wait_ms", self.db_pool_wait_seconds, 0.001),
            ("requests_errors", self.db_pool_timeouts, 1.0),
        ):
            value = stats.get(key, 0) * scale
            delta = value - self._pool_seen.get(key, 0.0)
            if delta > 0:
                counter.inc(delta)
                self._pool_seen[key] = value
        size, available = stats.get("pool_size", 0), stats.get("pool_available", 0)
        self.db_pool_connections.labels(state="idle").set(available)
        self.db_pool_connections.labels(state="busy").set(max(size - available, 0))
        self.db_pool_waiting.set(stats.get("requests_waiting", 0))

    def set_admission(self, admitted: int, waiting: int) -> None:
        """This process's runs working and waiting their turn (:mod:`bot.engine.admission`), at scrape time."""
        self.runs_admitted.set(admitted)
        self.runs_waiting_turn.set(waiting)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def token_counts(meta: Mapping[str, Any] | None) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` from a reply's ``meta["usage"]`` (0 where absent or not a number)."""
    usage = (meta or {}).get("usage") or {}
    values = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key) if isinstance(usage, Mapping) else None
        values.append(value if isinstance(value, int) and value >= 0 else 0)
    return values[0], values[1]
