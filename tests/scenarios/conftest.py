"""Fixtures of the scenarios that restart a PostgreSQL server under countersign."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.private_postgres import PrivatePostgres


@pytest.fixture(scope="module")
def server() -> Iterator[PrivatePostgres]:
    """A PostgreSQL server of the test module's own, which its tests may stop and start again."""
    started = PrivatePostgres.start()
    yield started
    started.close()
