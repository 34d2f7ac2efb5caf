"""The demo tools: files confined to a sandbox folder, a simulated restart and the clock."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.demo_tools import build_demo_toolset
from bot.tools import Tool, Toolset, import_attribute


def tools_by_name(toolset: Toolset) -> dict[str, Tool]:
    return {t.name: t for t in toolset}


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    return tmp_path / "sandbox"


@pytest.fixture
def tools(sandbox: Path) -> dict[str, Tool]:
    return tools_by_name(build_demo_toolset(sandbox))


def test_building_creates_the_sandbox_with_example_files(sandbox: Path) -> None:
    build_demo_toolset(sandbox)

    assert sorted(p.name for p in sandbox.iterdir()) == ["notes.txt", "old.log"]


def test_building_again_does_not_recreate_deleted_examples(sandbox: Path) -> None:
    build_demo_toolset(sandbox)
    (sandbox / "old.log").unlink()

    build_demo_toolset(sandbox)

    assert not (sandbox / "old.log").exists()


def test_the_toolset_has_the_six_tools_with_their_default_policies(tools: dict[str, Tool]) -> None:
    assert {name: t.confirmation_default for name, t in tools.items()} == {
        "list_files": "never",
        "read_file": "never",
        "write_file": "always",
        "delete_file": "always",
        "restart_service": "always",
        "get_time": "never",
    }
    assert tools["delete_file"].parameters["required"] == ["path"]
    assert "sandbox" in tools["delete_file"].description.lower()


def test_list_files_shows_the_files_with_sizes(tools: dict[str, Tool]) -> None:
    listing = tools["list_files"].invoke()

    assert "notes.txt (" in listing
    assert "old.log (" in listing


def test_read_write_and_delete_work_inside_the_sandbox(tools: dict[str, Tool], sandbox: Path) -> None:
    assert "Deploy checklist" in tools["read_file"].invoke(path="notes.txt")

    assert tools["write_file"].invoke(path="sub/new.txt", content="hello") == "Wrote 5 characters to sub/new.txt."
    assert (sandbox / "sub" / "new.txt").read_text() == "hello"

    assert tools["delete_file"].invoke(path="old.log") == "Deleted old.log."
    assert not (sandbox / "old.log").exists()


async def test_tools_run_from_async_code_too(tools: dict[str, Tool], sandbox: Path) -> None:
    assert await tools["delete_file"].invoke_async(path="./old.log") == "Deleted old.log."
    assert not (sandbox / "old.log").exists()


def test_deleting_a_missing_file_says_so(tools: dict[str, Tool]) -> None:
    with pytest.raises(FileNotFoundError, match="no file 'nope.txt'"):
        tools["delete_file"].invoke(path="nope.txt")


@pytest.mark.parametrize("tool_name", ["read_file", "delete_file", "write_file", "list_files"])
@pytest.mark.parametrize("escape", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd", "ABSOLUTE"])
def test_paths_escaping_the_sandbox_are_refused(
    tools: dict[str, Tool], tmp_path: Path, tool_name: str, escape: str
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    path = str(outside) if escape == "ABSOLUTE" else escape
    kwargs = {"path": path, "content": "overwritten"} if tool_name == "write_file" else {"path": path}

    with pytest.raises(ValueError, match="sandbox"):
        tools[tool_name].invoke(**kwargs)

    assert outside.read_text() == "precious"


def test_a_symlink_pointing_out_of_the_sandbox_is_refused(
    tools: dict[str, Tool], sandbox: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (sandbox / "link.txt").symlink_to(secret)

    for name in ("read_file", "delete_file"):
        with pytest.raises(ValueError, match="outside the sandbox"):
            tools[name].invoke(path="link.txt")

    assert secret.read_text() == "top secret"


def test_restart_service_only_simulates(tools: dict[str, Tool]) -> None:
    assert tools["restart_service"].invoke(service="nginx") == (
        "Service 'nginx' restarted (simulated: no real service was touched)."
    )
    assert "forcefully" in tools["restart_service"].invoke(service="nginx", force=True)


def test_get_time_returns_the_current_utc_time(tools: dict[str, Tool]) -> None:
    stamp = dt.datetime.fromisoformat(tools["get_time"].invoke())

    assert stamp.utcoffset() == dt.timedelta(0)
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 5


def test_default_demo_tools_create_their_sandbox_in_the_working_folder_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh interpreter shows that importing the module creates nothing in the working folder.
    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    subprocess.run([sys.executable, "-c", "import bot.demo_tools"], cwd=tmp_path, env=env, check=True)
    assert not (tmp_path / "countersign-sandbox").exists()

    monkeypatch.chdir(tmp_path)
    demo_tools = import_attribute("bot.demo_tools:demo_tools")
    listing = tools_by_name(demo_tools)["list_files"].invoke()

    assert (tmp_path / "countersign-sandbox" / "notes.txt").exists()
    assert "old.log" in listing


def test_default_demo_tools_round_trip_through_to_dict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    demo_tools = import_attribute("bot.demo_tools:demo_tools")

    restored = Toolset.from_dict(demo_tools.to_dict())

    assert [t.name for t in restored] == [t.name for t in demo_tools]
    assert tools_by_name(restored)["delete_file"].invoke(path="old.log") == "Deleted old.log."
