"""``countersign serve`` warns once at start when admins are configured and no tool has four-eyes (issue 27)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import pytest

from bot.self_approval import SELF_APPROVAL_WARNING
from tests.unit.bot.test_cli import TIMEOUT, clean_env


def _start_log(tmp_path, **env: str) -> list[str]:
    """What ``serve`` logs up to 'listening on', then it is stopped with SIGTERM."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path,
        env={**clean_env(tmp_path), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        log: list[str] = []
        while not re.search(r"listening on http://127\.0\.0\.1:\d+", log[-1] if log else ""):
            assert time.monotonic() < deadline and process.poll() is None, "".join(log)
            log.append(process.stderr.readline())
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return log


@pytest.mark.parametrize(("admins", "warnings"), [("U_ADMIN", 1), ("", 0)], ids=["admins", "no-admins"])
def test_serve_says_once_that_requesters_approve_their_own_calls(tmp_path, admins, warnings):
    log = _start_log(tmp_path, COUNTERSIGN_ADMINS=admins)

    assert sum(SELF_APPROVAL_WARNING in line for line in log) == warnings, "".join(log)
