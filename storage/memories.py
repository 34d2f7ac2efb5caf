"""The path saved agent configurations name the SQLite memory store by: ``storage.memories.SQLiteMemoryStore``.

:meth:`SQLiteMemoryStore.to_dict` writes this path (as it always has), so configurations saved before the
SQLite backend moved to :mod:`storage.sqlite` load unchanged; the class lives in :mod:`storage.sqlite.memories`.
"""

from storage.sqlite.memories import SQLiteMemoryStore

__all__ = ["SQLiteMemoryStore"]
