"""Both backends have the same shape: the same stores, the same methods, the same signatures.

Nothing here is listed by hand: the stores are :data:`storage.protocols.STORE_NAMES` (what the SQLite facade
wraps) and the protocols are every ``Protocol`` of :mod:`storage.protocols`. A store, a method or a
protocol added on one side only fails here, before an engine test meets an ``AttributeError`` on
PostgreSQL.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

import storage.protocols
from storage import AsyncStorage, open_async_storage
from storage.postgres import PostgresStorage
from storage.sqlite.aio import STORE_NAMES

SQLITE_ONLY = {"messages": {"close"}, "memories": {"close"}}
"""Public methods that only SQLite has, and why: a standalone SQLite message or memory store may own its file."""
POSTGRES_ONLY = {"memories": {"aclose"}}
"""Public methods that only PostgreSQL has, and why: a memory store built from a URL owns its pool."""
SERIALISATION = {"to_dict", "from_dict"}
"""Sync on both backends: a configuration is written and read without a database."""
SERVICES = {"InboxWakeups": "wakeups"}
"""Protocols that are natively async on both backends (subscriptions, not stores), by attribute."""


def _public_methods(store: Any) -> set[str]:
    return {name for name in dir(store) if not name.startswith("_") and callable(getattr(store, name))}


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _protocols() -> dict[str, type]:
    return {
        name: value
        for name, value in vars(storage.protocols).items()
        if isinstance(value, type) and Protocol in value.__mro__[1:] and value.__module__ == storage.protocols.__name__
    }


def _protocol_methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if not name.startswith("_") and callable(value)}


async def _both(tmp_path: Any, postgres_url: str) -> tuple[AsyncStorage, PostgresStorage]:
    sqlite = await open_async_storage(tmp_path / "countersign.db")
    postgres = await open_async_storage(tmp_path / "unused.db", database_url=postgres_url)
    return sqlite, postgres


async def test_both_backends_have_the_same_stores(tmp_path, postgres_url):
    sqlite, postgres = await _both(tmp_path, postgres_url)
    try:
        assert set(AsyncStorage.__annotations__) == set(STORE_NAMES)
        assert {name for name in vars(sqlite) if name in STORE_NAMES} == set(STORE_NAMES)
        assert {name for name in vars(postgres) if name not in ("db", "wakeups")} == set(STORE_NAMES)
    finally:
        await sqlite.aclose()
        await postgres.aclose()


async def test_every_store_has_the_same_methods_with_the_same_signatures_and_postgres_awaits_them(
    tmp_path, postgres_url
):
    sqlite, postgres = await _both(tmp_path, postgres_url)
    try:
        for name in STORE_NAMES:
            sqlite_store, postgres_store = sqlite.storage.__dict__[name], getattr(postgres, name)
            sqlite_methods = _public_methods(sqlite_store) - SQLITE_ONLY.get(name, set())
            assert sqlite_methods == _public_methods(postgres_store) - POSTGRES_ONLY.get(name, set()), name
            for method in sorted(sqlite_methods - SERIALISATION):
                assert inspect.iscoroutinefunction(getattr(postgres_store, method)), f"postgres {name}.{method}"
                assert _parameters(getattr(sqlite_store, method)) == _parameters(getattr(postgres_store, method)), (
                    f"{name}.{method}"
                )
    finally:
        await sqlite.aclose()
        await postgres.aclose()


async def test_every_storage_protocol_is_implemented_by_one_store_on_both_backends(tmp_path, postgres_url):
    sqlite, postgres = await _both(tmp_path, postgres_url)
    try:
        protocols = _protocols()
        assert len(protocols) >= 12  # ChatMessageStore ... Outbox: the lookup itself works
        for protocol_name, protocol in protocols.items():
            if protocol_name in SERVICES:
                continue
            needed = _protocol_methods(protocol)
            sqlite_stores = [n for n in STORE_NAMES if needed <= _public_methods(sqlite.storage.__dict__[n])]
            postgres_stores = [n for n in STORE_NAMES if needed <= _public_methods(getattr(postgres, n))]
            assert sqlite_stores, f"no SQLite store implements {protocol_name}"
            assert sqlite_stores == postgres_stores, protocol_name
    finally:
        await sqlite.aclose()
        await postgres.aclose()


async def test_every_service_has_the_same_async_methods_on_both_backends(tmp_path, postgres_url):
    sqlite, postgres = await _both(tmp_path, postgres_url)
    try:
        for protocol_name, attribute in SERVICES.items():
            needed = _protocol_methods(_protocols()[protocol_name])
            local, remote = getattr(sqlite, attribute), getattr(postgres, attribute)
            for service in (local, remote):
                assert needed <= _public_methods(service), f"{type(service).__name__}"
                for method in needed:
                    assert inspect.iscoroutinefunction(getattr(service, method)), f"{type(service).__name__}.{method}"
            for method in needed:
                assert _parameters(getattr(local, method)) == _parameters(getattr(remote, method)), method
    finally:
        await sqlite.aclose()
        await postgres.aclose()
