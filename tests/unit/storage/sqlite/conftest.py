"""Fixtures of the SQLite backend tests (the contract suite in ../contract/ has its own ``storage``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import open_storage


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[object]:
    """A fresh SQLite storage in this test's folder, closed after the test."""
    storage = open_storage(tmp_path / "countersign.db")
    yield storage
    storage.close()
