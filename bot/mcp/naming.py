"""``<server>__<tool>``: a name the OpenAI API accepts (``^[A-Za-z0-9_-]{1,64}$``), shortened and disambiguated."""

from __future__ import annotations

import hashlib
import re

_BAD = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64


def mcp_tool_name(server: str, tool: str, taken: set[str] | None = None) -> str:
    """``server__tool`` with characters outside ``[A-Za-z0-9_-]`` replaced by ``_``.

    A name longer than 64 characters, or one already in ``taken``, is cut and ends in a short hash of
    the original pair, so two tools never share a name and the same pair always gets the same name.

    >>> mcp_tool_name("fs", "read_file")
    'fs__read_file'
    >>> mcp_tool_name("fs", "read.file")
    'fs__read_file'
    """
    name = f"{server}__{_BAD.sub('_', tool)}"
    if len(name) <= MAX_NAME and (taken is None or name not in taken):
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"
