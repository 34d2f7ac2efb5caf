"""The Teams app package: manifest with the admin command list, icons of the required sizes, the zip."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adapters.teams.icons import draw
from adapters.teams.package import APP_PACKAGE, PLACEHOLDER, build_package, main, manifest_for
from bot.engine.admin_syntax import COMMAND_WORDS

APP_ID = "6f1c3b0e-5d1a-4c2b-9e8f-00000000a11d"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_manifest_lists_every_admin_command_within_teams_limits():
    manifest = json.loads((APP_PACKAGE / "manifest.json").read_text(encoding="utf-8"))
    [bot] = manifest["bots"]
    [command_list] = bot["commandLists"]
    titles = [c["title"] for c in command_list["commands"]]
    # Teams shows at most 10 commands: every title is a command; the few left out are in `help`.
    assert set(titles) <= set(COMMAND_WORDS) and "help" in titles
    assert len(titles) == 10
    assert set(COMMAND_WORDS) - set(titles) == {
        "four-eyes",
        "memory",
        "usage",
        "justification",
        "respondable",
        "breakglass",
        "mcp",
    }  # listed by `help`
    assert all(len(c["title"]) <= 32 and len(c["description"]) <= 128 for c in command_list["commands"])
    assert set(bot["scopes"]) == {"personal", "team", "groupChat"}
    assert len(manifest["name"]["short"]) <= 30 and len(manifest["description"]["short"]) <= 80
    assert manifest["id"] == bot["botId"] == PLACEHOLDER


def test_the_manifest_is_on_schema_1_29_and_allowed_into_shared_and_private_channels():
    manifest = json.loads((APP_PACKAGE / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["manifestVersion"] == "1.29"
    assert manifest["$schema"].endswith("/teams/v1.29/MicrosoftTeams.schema.json")
    assert manifest["supportedChannelTypes"] == ["sharedChannels", "privateChannels"]


def test_the_manifest_asks_for_channel_replies_without_a_mention():
    # Resource-specific consent: Teams then delivers every channel reply (needed for reply mode `requester`).
    manifest = json.loads((APP_PACKAGE / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["webApplicationInfo"]["id"] == PLACEHOLDER
    assert manifest["authorization"]["permissions"]["resourceSpecific"] == [
        {"name": "ChannelMessage.Read.Group", "type": "Application"}
    ]


def test_the_icons_have_the_sizes_teams_requires():
    assert png_size((APP_PACKAGE / "color.png").read_bytes()) == (192, 192)
    assert png_size((APP_PACKAGE / "outline.png").read_bytes()) == (32, 32)
    regenerated = draw(32, 3.5, None)
    assert (APP_PACKAGE / "outline.png").read_bytes() == regenerated, "regenerate: python -m adapters.teams.icons"


def test_the_package_is_a_zip_with_the_app_id_filled_in(tmp_path):
    package = build_package(APP_ID, tmp_path / "countersign-teams.zip")
    with zipfile.ZipFile(package) as archive:
        assert sorted(archive.namelist()) == ["color.png", "manifest.json", "outline.png"]
        manifest = json.loads(archive.read("manifest.json"))
    assert manifest["id"] == manifest["bots"][0]["botId"] == manifest["webApplicationInfo"]["id"] == APP_ID
    assert PLACEHOLDER not in json.dumps(manifest)


def test_the_package_refuses_an_app_id_that_is_not_a_guid():
    with pytest.raises(ValueError, match="GUID"):
        manifest_for("my-bot")


def test_a_bad_app_id_is_one_line_exit_2_and_leaves_no_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.teams.package", "not-a-guid", "x.zip"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "Microsoft App ID must be a GUID" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_target_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    assert main(["00000000-0000-0000-0000-000000000000", str(tmp_path / "missing" / "x.zip")]) == 2
    assert list(tmp_path.iterdir()) == []
