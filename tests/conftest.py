"""Shared pytest fixtures for the countersign test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.postgres import PostgresUnreachable, SchemaFactory, postgres_test_url


@pytest.fixture(scope="session")
def postgres_schemas():
    """The test PostgreSQL server; every test that asks for it FAILS (never skips) when it cannot be reached."""
    factory = SchemaFactory(postgres_test_url())
    try:
        factory.check()
    except PostgresUnreachable as exc:
        factory.close()
        pytest.fail(str(exc), pytrace=False)
    yield factory
    factory.close()


@pytest.fixture
def postgres_url(postgres_schemas) -> Iterator[str]:
    """A ``postgresql://`` URL whose ``search_path`` is a fresh, migrated schema of this test's own."""
    url = postgres_schemas.take()
    yield url
    postgres_schemas.release(url)
