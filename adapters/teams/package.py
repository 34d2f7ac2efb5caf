"""Build the Teams app package (a zip to sideload): ``python -m adapters.teams.package <app-id> [out.zip]``.

The manifest source in ``appPackage/manifest.json`` holds ``{{MICROSOFT_APP_ID}}`` where the bot's
Microsoft App ID (the Azure Bot's client id) goes; the zip carries the filled-in manifest and the
two icons at its root, as Teams requires.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

APP_PACKAGE = Path(__file__).parent / "appPackage"
PLACEHOLDER = "{{MICROSOFT_APP_ID}}"
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def manifest_for(app_id: str) -> str:
    """The manifest text with the bot's app id filled in; ``ValueError`` unless it is a GUID."""
    if not _GUID.match(app_id):
        raise ValueError(f"the Microsoft App ID must be a GUID, got {app_id!r}")
    return (APP_PACKAGE / "manifest.json").read_text(encoding="utf-8").replace(PLACEHOLDER, app_id.lower())


def build_package(app_id: str, out: Path) -> Path:
    """Write the sideloadable zip to ``out`` and return it."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as package:
        package.writestr("manifest.json", manifest_for(app_id))
        for icon in ("color.png", "outline.png"):
            package.write(APP_PACKAGE / icon, icon)
    return out


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python -m adapters.teams.package <microsoft-app-id> [countersign-teams.zip]")
    target = Path(sys.argv[2] if len(sys.argv) == 3 else "countersign-teams.zip")
    print(build_package(sys.argv[1], target))
