"""Opening the configured database at start, with one line naming the setting when it cannot be opened.

``chat``, ``serve`` (through :meth:`bot.engine.engine.Engine.create`) and the ``db``/``audit`` commands open
storage through :func:`open_configured_storage`. A database that cannot be opened is a configuration problem
(a path that cannot hold a SQLite file, a PostgreSQL server that does not answer within
``COUNTERSIGN_DB_CONNECT_TIMEOUT``, a schema written by a newer countersign): it leaves as
:class:`DatabaseUnavailable`, a :class:`bot.config.ConfigError`, so ``countersign`` prints one line and exits 2.
The line never carries the URL's password.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

from bot.config import Config, ConfigError
from storage import DatabaseUnreachable, StorageError, UnknownSchemaVersion, open_async_storage
from storage.async_protocols import AsyncStores

_PASSWORD_IN_URL = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")


class DatabaseUnavailable(ConfigError):
    """The configured database cannot be opened; ``str()`` is one line naming the setting.

    ``retryable``: the server did not answer (:class:`storage.DatabaseUnreachable`), so trying again later may
    work (``serve`` keeps trying); otherwise (a newer schema, a path SQLite cannot open) it will not.
    """

    def __init__(self, line: str, *, retryable: bool = False) -> None:
        super().__init__(line)
        self.retryable = retryable


def database_setting(config: Config) -> str:
    """The variable that chose the database: ``COUNTERSIGN_DATABASE_URL`` or ``COUNTERSIGN_DB``."""
    return "COUNTERSIGN_DATABASE_URL" if config.database_url else "COUNTERSIGN_DB"


def without_password(text: str) -> str:
    """``text`` with any ``postgresql://user:password@`` password masked.

    >>> without_password("postgresql://u:secret@h/db")
    'postgresql://u:***@h/db'
    """
    return _PASSWORD_IN_URL.sub(r"\1***@", text)


def describe(exc: BaseException, config: Config) -> str:
    """One line for a database that could not be opened at start (the setting, what is wrong, what to do)."""
    setting = database_setting(config)
    first = without_password(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    if config.database_url and config.database_url in first:
        first = first.replace(config.database_url, without_password(config.database_url))
    if isinstance(exc, UnknownSchemaVersion):
        return f"{setting}: {first} (or point {setting} at another database)"
    if isinstance(exc, DatabaseUnreachable):
        return (
            f"{setting}: PostgreSQL did not answer within {config.db_connect_timeout:g} s "
            f"(COUNTERSIGN_DB_CONNECT_TIMEOUT): {first}"
        )
    if config.database_url:
        return f"{setting}: {first}"
    return f"{setting}: cannot open {config.db_path} as the SQLite database: {first}"


@contextlib.contextmanager
def quiet_pool() -> Iterator[None]:
    """The pool logs a warning per failed attempt while it waits; the one line at the end says it all."""
    pool_logger = logging.getLogger("psycopg.pool")
    previous = pool_logger.level
    pool_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pool_logger.setLevel(previous)


async def open_configured_storage(config: Config, **options: Any) -> AsyncStores:
    """:func:`storage.open_async_storage` on ``config``'s database, with its audit key and connect timeout.

    Raises :class:`DatabaseUnavailable` (one line) when the database cannot be opened or is too new.
    """
    try:
        with quiet_pool():
            return await open_async_storage(
                config.db_path,
                database_url=config.database_url,
                audit_key=config.audit_key,
                connect_timeout=config.db_connect_timeout,
                **options,
            )
    except StorageError as exc:
        raise DatabaseUnavailable(describe(exc, config), retryable=isinstance(exc, DatabaseUnreachable)) from None
