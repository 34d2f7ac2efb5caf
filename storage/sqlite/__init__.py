"""countersign: the SQLite backend, the embedded default: every store of :mod:`storage.protocols` in one file.

Blocking sqlite-utils stores (:class:`Storage`, opened by :func:`open_storage`) and their async face
(:class:`AsyncStorage`), with the forward migrations of :mod:`storage.sqlite.migrations`. What both backends
share (records, codecs, validation rules) lives at the top of :mod:`storage`, never here.

>>> storage = open_storage("countersign.db")
"""

from storage.sqlite.aio import AsyncStorage, AsyncStore
from storage.sqlite.database import Storage, open_storage

__all__ = ["AsyncStorage", "AsyncStore", "Storage", "open_storage"]
