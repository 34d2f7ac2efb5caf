"""Long-term memory: a searchable store scoped to users, runs and agents, and what the agent does with it.

>>> store = SQLiteMemoryStore("countersign.db")
>>> store.add_memories(["our staging cluster is eu-2"], user_id="U_ANA")
>>> agent = Agent(generator, memory_store=store)
>>> agent.run([ChatMessage.from_user("which staging cluster?")], memory_store_kwargs={"user_id": "U_ANA"})

The stores live in :mod:`storage` (SQLite FTS5 in the same file, PostgreSQL full-text search); this
package names them for users (through :mod:`bot.memory.stores`). ``PostgresMemoryStore`` is imported on first
use, so that SQLite users never load the PostgreSQL driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.memory.context import MEMORY_HEADER, memory_message, search_for_run
from bot.memory.stores import SQLiteMemoryStore, postgres_memory_store_class
from storage.memory_filters import FilterError, validate_filter
from storage.protocols import Memory, MemoryStore

if TYPE_CHECKING:  # imported on first use at run time (__getattr__ below)
    from bot.memory.stores import PostgresMemoryStore

__all__ = [
    "MEMORY_HEADER",
    "FilterError",
    "Memory",
    "MemoryStore",
    "PostgresMemoryStore",
    "SQLiteMemoryStore",
    "memory_message",
    "search_for_run",
    "validate_filter",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresMemoryStore":
        return postgres_memory_store_class()
    raise AttributeError(f"module 'bot.memory' has no attribute {name!r}")
