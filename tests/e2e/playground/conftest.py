"""The real Microsoft 365 Agents Playground in a real browser, against a real ``countersign serve``.

* ``countersign serve`` runs in Teams anonymous mode with the offline demo model and the demo tools, in a
  folder of its own (its sandbox holds the files the tests delete);
* the Playground is the npm package pinned in ``tests/npm/playground`` (``npm ci`` there; .ci/run does it),
  started as ``agentsplayground -e http://127.0.0.1:PORT/api/messages -c emulator --disable-telemetry -p P``.
  It needs no network: the only outside requests its page makes are web fonts, which the browser refuses;
* the browser is Debian's ``chromium`` driven by Playwright for Python (never ``playwright install``).

Every test of the module shares one page, i.e. one conversation, in file order. A failing test leaves a
screenshot and the page's HTML in ``$COUNTERSIGN_ARTIFACTS`` (default: the session's temporary folder),
and the logs of both processes are printed.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PLAYGROUND = REPO / "tests" / "npm" / "playground" / "node_modules" / ".bin" / "agentsplayground"
START_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[str]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.text())
            if found:
                return found
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)  # polling a log file for a line, with a deadline
        raise AssertionError(f"{self.name} did not log {pattern!r}:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def _start(name: str, command: list[str], folder: Path, env: dict[str, str], cwd: Path) -> Process:
    log = folder / f"{name}.log"
    handle = log.open("w")
    popen = subprocess.Popen(command, cwd=cwd, env=env, stdout=handle, stderr=subprocess.STDOUT, text=True)
    return Process(name, popen, log)


@dataclass
class Stack:
    serve: Process
    playground: Process
    sandbox: Path
    url: str
    folder: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """``countersign serve`` (anonymous Teams, offline demo model) and the Agents Playground pointed at it."""
    if not PLAYGROUND.exists():
        pytest.fail(f"the Agents Playground is not installed: run `npm ci` in {PLAYGROUND.parents[2]}", pytrace=False)
    folder = tmp_path_factory.mktemp("playground")
    sandbox = folder / "countersign-sandbox"
    sandbox.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SLACK_", "COUNTERSIGN_"))}
    env.update(COUNTERSIGN_TEAMS_ANONYMOUS="1", COUNTERSIGN_DB=str(folder / "cs.db"), COUNTERSIGN_ADMINS="")
    countersign = Path(sys.executable).with_name("countersign")
    serve = _start("serve", [str(countersign), "serve", "--host", "127.0.0.1", "--port", "0"], folder, env, folder)
    playground = None
    try:
        port = int(serve.wait_for(r"listening on http://127\.0\.0\.1:(\d+)").group(1))
        ui_port = _free_port()
        command = [
            str(PLAYGROUND),
            "-e",
            f"http://127.0.0.1:{port}/api/messages",
            "-c",
            "emulator",
            "--disable-telemetry",
            "-p",
            str(ui_port),
        ]
        playground = _start("playground", command, folder, {**env, "BROWSER": "none"}, folder)
        playground.wait_for(rf"Listening on {ui_port}")
        yield Stack(serve, playground, sandbox, f"http://localhost:{ui_port}", folder)
    finally:
        if playground is not None:
            playground.stop()
        serve.stop()


def _local_only(route) -> None:
    """The page may reach the Playground only: its web fonts come from a CDN this machine cannot reach."""
    url = route.request.url
    if url.startswith(("http://localhost", "http://127.0.0.1", "ws://localhost", "ws://127.0.0.1", "data:")):
        route.continue_()
    else:
        route.abort()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed (apt-get install -y chromium; .ci/run does it)", pytrace=False)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def page(browser, stack: Stack) -> Iterator[object]:
    """One Playground page (one personal chat) shared by the module's tests, in order."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    opened.route("**/*", _local_only)
    opened.goto(stack.url)
    yield opened
    context.close()


def artifacts_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("COUNTERSIGN_ARTIFACTS") or tmp_path_factory.getbasetemp() / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call" and report.failed:
        page = item.funcargs.get("page") if hasattr(item, "funcargs") else None
        stack = item.funcargs.get("stack") if hasattr(item, "funcargs") else None
        folder = artifacts_folder(item.config._tmp_path_factory)  # type: ignore[attr-defined]
        name = re.sub(r"[^\w.-]", "_", item.name)
        if page is not None:
            try:
                page.screenshot(path=str(folder / f"{name}.png"), full_page=True)
                (folder / f"{name}.html").write_text(page.content())
            except Exception as exc:  # noqa: BLE001 - the report is what matters
                print(f"no screenshot: {exc}")
        if isinstance(stack, Stack):
            print(f"--- serve log\n{stack.serve.text()[-4000:]}\n--- playground log\n{stack.playground.text()[-2000:]}")
        print(f"artifacts in {folder}")
    return report
