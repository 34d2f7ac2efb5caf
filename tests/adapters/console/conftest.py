"""Fixtures of the console suites."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.console_kit import ConsoleHarness


@pytest.fixture
def harness(tmp_path: Path) -> ConsoleHarness:
    """``countersign chat`` on a SQLite file in this test's folder."""
    return ConsoleHarness(tmp_path)
