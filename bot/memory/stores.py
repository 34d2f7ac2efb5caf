"""The concrete memory stores that users name from :mod:`bot.memory`: the one place in ``bot/`` that imports a backend.

API.md promises ``SQLiteMemoryStore`` (and the PostgreSQL one) in ``bot.memory``, so users build a memory store
without learning the storage layout. Everything else in ``bot/`` sees only :class:`storage.protocols.MemoryStore`;
the import-linter contract "bot never imports a concrete storage backend" names this module as its one exception.
``PostgresMemoryStore`` is imported on first use, so that SQLite users never load the PostgreSQL driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.sqlite.memories import SQLiteMemoryStore

if TYPE_CHECKING:
    from storage.postgres.memories import PostgresMemoryStore

__all__ = ["SQLiteMemoryStore", "postgres_memory_store_class"]


def postgres_memory_store_class() -> type[PostgresMemoryStore]:
    """The PostgreSQL memory store class, imported now (it loads psycopg)."""
    from storage.postgres.memories import PostgresMemoryStore

    return PostgresMemoryStore
