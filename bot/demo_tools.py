"""Demo tools: files in one sandbox folder, a simulated service restart and the clock.

``demo_tools`` is the default of ``COUNTERSIGN_TOOLS`` (``bot.demo_tools:demo_tools``); it works in
``./countersign-sandbox`` under the working folder at call time, creating it on first use (never at
import). ``build_demo_toolset(folder)`` gives the same tools over another folder, e.g. a test's tmp_path.

Every path is confined to the sandbox: absolute paths, ``..`` that climbs out, and symlinks that
point out are refused with ``ValueError``. Deleting, writing and restarting ask for approval by default.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from bot.tools import Tool, Toolset, tool

DEFAULT_SANDBOX_NAME = "countersign-sandbox"
MAX_READ_CHARS = 20_000

SEED_FILES = {
    "notes.txt": "Deploy checklist:\n- run migrations\n- restart the web service\n- watch the error rate\n",
    "old.log": "2024-01-01T00:00:00Z INFO old log lines nobody needs any more\n",
}


class Sandbox:
    """One folder the demo tools may touch; ``root=None`` means ``./countersign-sandbox`` at call time.

    >>> Sandbox(tmp_path).resolve("notes.txt")
    PosixPath('/tmp/.../notes.txt')
    """

    def __init__(self, root: Path | None = None) -> None:
        self._root = Path(root) if root is not None else None

    @property
    def root(self) -> Path:
        """The sandbox folder, resolved now (the working folder may have changed since import)."""
        return self._root if self._root is not None else Path.cwd() / DEFAULT_SANDBOX_NAME

    def ensure(self) -> Path:
        """Create the folder if missing, seeding example files on first creation; return its real path."""
        root = self.root
        if not root.exists():
            root.mkdir(parents=True)
            for name, text in SEED_FILES.items():
                (root / name).write_text(text, encoding="utf-8")
        return root.resolve()

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` inside the sandbox; ``ValueError`` if it would leave it."""
        root = self.ensure()
        if not isinstance(path, str) or not path.strip():
            raise ValueError("A path inside the sandbox is required.")
        if os.path.isabs(path) or path.startswith("~"):
            raise ValueError(f"Path {path!r} is absolute; use a path relative to the sandbox folder.")
        candidate = (root / path).resolve()  # follows symlinks, so a link pointing out is caught too
        if not candidate.is_relative_to(root):
            raise ValueError(f"Path {path!r} is outside the sandbox folder; it is refused.")
        return candidate

    def display(self, target: Path) -> str:
        """``target`` relative to the sandbox, for messages."""
        relative = target.relative_to(self.ensure()).as_posix()
        return relative if relative != "." else "."

    # --- the operations the tools expose ------------------------------------------------------

    def list_files(self, path: str = ".") -> str:
        """See :func:`list_files`."""
        folder = self.resolve(path)
        if not folder.is_dir():
            raise ValueError(f"{path!r} is not a folder in the sandbox.")
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
        if not entries:
            return f"The folder {self.display(folder)!r} is empty."
        lines = [f"{p.name}/" if p.is_dir() else f"{p.name} ({p.lstat().st_size} bytes)" for p in entries]
        return "\n".join(lines)

    def read_file(self, path: str) -> str:
        """See :func:`read_file`."""
        target = self.resolve(path)
        if not target.is_file():
            raise FileNotFoundError(f"There is no file {path!r} in the sandbox.")
        text = target.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_READ_CHARS:
            return text[:MAX_READ_CHARS] + f"\n[... truncated, {len(text)} characters in all]"
        return text

    def write_file(self, path: str, content: str) -> str:
        """See :func:`write_file`."""
        target = self.resolve(path)
        if target.is_dir():
            raise ValueError(f"{path!r} is a folder, not a file.")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return f"Wrote {len(content)} characters to {self.display(target)}."

    def delete_file(self, path: str) -> str:
        """See :func:`delete_file`."""
        target = self.resolve(path)
        if target.is_dir():
            raise ValueError(f"{path!r} is a folder; only files can be deleted.")
        if not target.exists():
            raise FileNotFoundError(f"There is no file {path!r} in the sandbox.")
        target.unlink()
        return f"Deleted {self.display(target)}."


def restart_service_simulated(service: str, force: bool = False) -> str:
    """The sentence :func:`restart_service` answers (nothing is really restarted)."""
    if not service.strip():
        raise ValueError("A service name is required.")
    how = "forcefully restarted" if force else "restarted"
    return f"Service {service!r} {how} (simulated: no real service was touched)."


def current_time() -> str:
    """The current UTC time, ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


# --- the default toolset over ./countersign-sandbox -------------------------------------------
# Module-level functions (not closures) so that Tool.to_dict()/from_dict() can import them back.

_DEFAULT_SANDBOX = Sandbox()


@tool(confirmation_default="never")
def list_files(path: str = ".") -> str:
    """List the files and folders in a folder of the sandbox, with file sizes.

    :param path: Folder relative to the sandbox root; "." is the root.
    """
    return _DEFAULT_SANDBOX.list_files(path)


@tool(confirmation_default="never")
def read_file(path: str) -> str:
    """Read a text file from the sandbox.

    :param path: File path relative to the sandbox root, e.g. notes.txt.
    """
    return _DEFAULT_SANDBOX.read_file(path)


@tool(confirmation_default="always")
def write_file(path: str, content: str) -> str:
    """Create or overwrite a text file in the sandbox.

    :param path: File path relative to the sandbox root; missing folders are created.
    :param content: The full new text of the file.
    """
    return _DEFAULT_SANDBOX.write_file(path, content)


@tool(confirmation_default="always")
def delete_file(path: str) -> str:
    """Delete a file from the sandbox. This cannot be undone.

    :param path: File path relative to the sandbox root, e.g. old.log.
    """
    return _DEFAULT_SANDBOX.delete_file(path)


@tool(confirmation_default="always")
def restart_service(service: str, force: bool = False) -> str:
    """Restart a service (simulated for the demo: nothing is really restarted).

    :param service: Service name, e.g. nginx.
    :param force: Kill the process if it does not stop by itself.
    """
    return restart_service_simulated(service, force)


@tool(confirmation_default="never")
def get_time() -> str:
    """Get the current date and time (UTC, ISO 8601)."""
    return current_time()


demo_tools = Toolset([list_files, read_file, write_file, delete_file, restart_service, get_time])
"""The default ``COUNTERSIGN_TOOLS``: the demo tools over ``./countersign-sandbox`` (created on first use)."""


def build_demo_toolset(sandbox: Path) -> Toolset:
    """The demo tools confined to ``sandbox`` (created and seeded with notes.txt and old.log if missing).

    >>> tools = build_demo_toolset(tmp_path / "sandbox")
    >>> next(t for t in tools if t.name == "delete_file").invoke(path="old.log")
    'Deleted old.log.'
    """
    box = Sandbox(Path(sandbox))
    box.ensure()
    functions = {
        "list_files": box.list_files,
        "read_file": box.read_file,
        "write_file": box.write_file,
        "delete_file": box.delete_file,
        "restart_service": restart_service_simulated,
        "get_time": current_time,
    }
    return Toolset(_rebind(t, functions[t.name]) for t in demo_tools)


def _rebind(template: Tool, function: object) -> Tool:
    """A copy of ``template`` (name, description, schema, default policy) calling ``function``."""
    return Tool(
        name=template.name,
        description=template.description,
        parameters=template.parameters,
        function=function,  # type: ignore[arg-type]
        confirmation_default=template.confirmation_default,
    )
