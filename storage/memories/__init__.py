"""The path saved agent configurations name the SQLite memory store by: ``storage.memories.SQLiteMemoryStore``.

:meth:`SQLiteMemoryStore.to_dict` writes this path (as it always has), so configurations saved before the
SQLite backend moved to :mod:`storage.sqlite` load unchanged; the class lives in :mod:`storage.sqlite.memories`.
A package rather than a module, so that git pairs the old ``storage/memories.py`` with its new home.
"""

from storage.sqlite.memories import SQLiteMemoryStore

__all__ = ["SQLiteMemoryStore"]
