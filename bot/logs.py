"""Log lines that carry their context: which run, approval, thread, tool and surface they are about.

The engine binds that context once where it starts working on something (:func:`log_context`), and
every line logged inside, by any module and in any task started from there, carries it: a
:class:`ContextFilter` on the handler copies the bound fields onto each record. The text format shows
them as ``key=value`` after the message (see ``bot.cli.ContextFormatter``); the JSON format
(``COUNTERSIGN_LOG_FORMAT=json``) writes one JSON object per line through structlog's
``ProcessorFormatter``, with the same fields as keys.

structlog rather than python-json-logger: its ``contextvars`` binding is the context mechanism itself
(async-safe, copied into tasks), and its ``ProcessorFormatter`` renders the standard library's records,
so the codebase's ``logger.info(..., extra={...})`` calls stay as they are.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import structlog
from structlog.contextvars import bind_contextvars, get_contextvars

from bot.redaction import MASK, mask_text

LOG_FORMATS = ("text", "json")
CONTEXT_KEYS = ("run_id", "approval_id", "thread_key", "tool", "surface")
"""The fields :func:`log_context` binds (anything else is refused, so the context stays small and safe).

The thread is ``thread_key`` (its storage key): a log record's own ``thread`` attribute is the OS thread."""
VALUE_LIMIT = 300


class log_context:  # noqa: N801 - used as a function (``with log_context(...)``), as it always was
    """Bind context for every log line written inside the block (and in tasks started from it).

    ``None`` values are skipped; an inner block adds to (and may override) the outer one's fields.

    >>> with log_context(run_id="run-1", surface="slack"):
    ...     logger.info("run started")   # ... run started run_id=run-1 surface=slack
    """

    # A class rather than structlog's ``bound_contextvars``: that one copies the whole context (every
    # context variable of the task) to save the outer values, and is a generator-based context manager;
    # the engine enters this several times per conversation. The effect is the same: the fields are set
    # on structlog's own context variables and their previous values are put back on exit.
    __slots__ = ("_fields", "_tokens")

    def __init__(self, **fields: Any) -> None:
        if not fields.keys() <= _CONTEXT_KEY_SET:
            unknown = set(fields) - _CONTEXT_KEY_SET
            raise ValueError(f"not a log context field: {', '.join(sorted(unknown))}")
        self._fields = {key: value for key, value in fields.items() if value is not None}
        self._tokens: Mapping[str, contextvars.Token[Any]] = {}

    def __enter__(self) -> None:
        self._tokens = bind_contextvars(**self._fields)

    def __exit__(self, *exc_info: object) -> None:
        # Set back rather than ``Token.reset``: like structlog's own helper, this works even when the
        # block was left in another context than it was entered in.
        for token in self._tokens.values():
            old = token.old_value
            token.var.set(Ellipsis if old is contextvars.Token.MISSING else old)


_CONTEXT_KEY_SET = frozenset(CONTEXT_KEYS)


class ContextFilter(logging.Filter):
    """Copies the bound context onto each record (a field given in ``extra=`` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add the context; never drops a record."""
        for key, value in get_contextvars().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        text = mask_text(value)
        return text if len(text) <= VALUE_LIMIT else text[: VALUE_LIMIT - 1] + "…"
    if isinstance(value, bool | int | float) or value is None:
        return value
    return _masked(str(value))


def _mask_fields(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Secrets masked and long values cut in every field but the traceback (which operators need whole)."""
    for key, value in list(event.items()):
        if key not in ("exception", "event"):
            event[key] = _masked(value)
    if isinstance(event.get("event"), str):
        event["event"] = mask_text(event["event"])
    return event


def json_formatter(*, tracebacks: bool) -> logging.Formatter:
    """One JSON object per line: ``timestamp``, ``level``, ``logger``, ``event`` (the message) and the context.

    Without ``tracebacks`` an exception is summarised in ``error`` instead of a full ``exception``.
    """

    def summarise_exception(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        exc_info = event.pop("exc_info", None)
        if exc_info and not tracebacks:
            error = exc_info[1] if isinstance(exc_info, tuple) else None
            if error is not None:
                event["error"] = f"{type(error).__name__}: {error}"
        elif exc_info:
            event["exc_info"] = exc_info
        return event

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
            structlog.stdlib.ExtraAdder(),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            summarise_exception,
            structlog.processors.format_exc_info,
            _mask_fields,
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
    )


SECRET_MIN_LENGTH = 6
"""Configured values shorter than this are not hunted for in log text (they would mask ordinary words)."""


class SecretMaskingFormatter(logging.Formatter):
    """Wraps a formatter: every configured secret value is replaced by the mask in the finished line.

    Pattern masking (:func:`bot.redaction.mask_text`) cannot know that ``gw-secret-777`` is a header
    value an LLM gateway echoed into its error; this knows the configured values, and works on the whole
    output, tracebacks and both formats included.
    """

    def __init__(self, inner: logging.Formatter, secrets: Sequence[str]) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = sorted({s for s in secrets if len(s) >= SECRET_MIN_LENGTH}, key=len, reverse=True)

    def format(self, record: logging.LogRecord) -> str:
        """The inner formatter's line with each secret value masked."""
        text = self.inner.format(record)
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text
