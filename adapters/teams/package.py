"""Build the Teams app package (a zip to sideload): ``python -m adapters.teams.package <app-id> [out.zip]``.

The manifest source in ``appPackage/manifest.json`` holds ``{{MICROSOFT_APP_ID}}`` where the bot's
Microsoft App ID (the Azure Bot's client id) goes; the zip carries the filled-in manifest and the
two icons at its root, as Teams requires.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
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
    """Write the sideloadable zip to ``out`` and return it; ``out`` appears whole or not at all."""
    manifest = manifest_for(app_id)  # checked before anything is written
    handle, partial = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as package:
            package.writestr("manifest.json", manifest)
            for icon in ("color.png", "outline.png"):
                package.write(APP_PACKAGE / icon, icon)
        os.replace(partial, out)
    finally:
        Path(partial).unlink(missing_ok=True)
    return out


USAGE = "usage: python -m adapters.teams.package <microsoft-app-id> [countersign-teams.zip]"


def main(argv: list[str]) -> int:
    """The command line: one line and exit code 2 for a bad App ID or output path, never a traceback."""
    if len(argv) not in (1, 2):
        print(USAGE, file=sys.stderr)
        return 2
    target = Path(argv[1] if len(argv) == 2 else "countersign-teams.zip")
    try:
        print(build_package(argv[0], target))
    except ValueError as error:
        print(
            f"countersign: {error} (the Azure Bot's Microsoft App ID, e.g. 00000000-0000-0000-0000-000000000000)",
            file=sys.stderr,
        )
        return 2
    except OSError as error:
        print(f"countersign: cannot write {target}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
