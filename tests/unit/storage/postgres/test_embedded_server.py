"""The throwaway PostgreSQL server the suite starts on a machine without one (tests/fakes/embedded_postgres.py).

The machine's real server stays on 5432; "no server" is simulated with a default URL on a port nothing
listens on, so the session helper has to start its own.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from tests.fakes.embedded_postgres import ENV_URL, answers, binary_folders, session_database_url, start_embedded
from tests.fakes.private_postgres import _free_port


def _unused_default_url() -> str:
    port = _free_port()
    assert port != 5432
    return f"postgresql://postgres@127.0.0.1:{port}/test"


def test_with_nothing_listening_the_session_starts_a_server_exports_it_and_removes_it_after() -> None:
    default = _unused_default_url()
    assert not answers(default)
    env: dict[str, str] = {}

    url, server = session_database_url(env, default_url=default)

    assert server is not None
    try:
        assert env[ENV_URL] == url
        assert url != default and url.endswith("/test")
        with psycopg.connect(url, connect_timeout=5) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("test",)
        folder = server.folder
        assert folder.exists()
    finally:
        server.close()
    assert not folder.exists()
    assert not answers(url)


def test_a_configured_url_or_a_server_on_the_default_port_is_used_as_it_is(postgres_url: str) -> None:
    assert session_database_url({ENV_URL: "postgresql://x@db.example:5/test"}) == (
        "postgresql://x@db.example:5/test",
        None,
    )
    machine = "postgresql://postgres@127.0.0.1:5432/test"
    assert answers(machine)  # the project's machines and CI run one
    assert session_database_url({}, default_url=machine) == (machine, None)


def test_the_pip_installed_server_of_the_test_extras_is_found_and_runs() -> None:
    import pgserver  # type: ignore[import-untyped]

    bundled = Path(pgserver.__file__).parent / "pginstall" / "bin"
    assert bundled in binary_folders({})

    url, server = start_embedded([bundled])
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            version = conn.execute("SHOW server_version").fetchone()
        assert version is not None and version[0].startswith("16.")
    finally:
        server.close()


def test_without_any_binaries_it_says_what_to_install(tmp_path: Path) -> None:
    from tests.fakes.private_postgres import PrivateServerUnavailable

    with pytest.raises(PrivateServerUnavailable, match=r"pip install -e '\.\[test\]'"):
        start_embedded([])
