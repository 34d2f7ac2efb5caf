"""Real npm packages the tests run (MCP servers, the Agents Playground), installed from their lockfiles.

The README's test command is plain ``pytest``: on a fresh clone nothing has run ``npm ci`` yet, so the
first test that needs a package installs it from the committed lockfile (never ``npx``, never an
unlocked version). Without Node.js the test fails saying what to install; it never skips.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NPM_TIMEOUT_SECONDS = 300


def installed_bin(folder: Path) -> Path:
    """``folder/node_modules/.bin``, after ``npm ci`` in ``folder`` if it has not run there yet."""
    bin_dir = folder / "node_modules" / ".bin"
    if bin_dir.is_dir():
        return bin_dir
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"these tests run real npm packages: install Node.js and npm, then `npm ci` in {folder}")
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=NPM_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0 or not bin_dir.is_dir():
        pytest.fail(f"`npm ci` in {folder} failed: {done.stderr.strip()[-500:]}")
    return bin_dir
