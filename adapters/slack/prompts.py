"""Suggested prompts for Slack's AI-app surface (a DM with the app opened as an assistant thread).

When a person opens an assistant thread, Slack sends ``assistant_thread_started``; the app may answer
with ``assistant.threads.setSuggestedPrompts``, which takes at most 4 prompts. They come from the
configured tools, in their order: a title (at most 75 characters here) and the message Slack sends as the
person's when they click it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_PROMPTS = 4
"""``assistant.threads.setSuggestedPrompts`` takes at most 4 prompts."""
TITLE_LIMIT = 75
MESSAGE_LIMIT = 300


def _first_sentence(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line.split(". ", 1)[0].rstrip(".")


def suggested_prompts(tools: Iterable[Any]) -> list[dict[str, str]]:
    """Up to 4 prompts, one per configured tool: "Delete file" → "Help me with delete_file: Delete a file…"."""
    prompts = []
    for tool in tools:
        name = str(getattr(tool, "name", "") or "")
        if not name:
            continue
        title = name.replace("_", " ").strip().capitalize()[:TITLE_LIMIT]
        what = _first_sentence(str(getattr(tool, "description", "") or ""))
        message = f"Help me with {name}" + (f": {what[0].lower()}{what[1:]}" if what else "")
        prompts.append({"title": title, "message": message[:MESSAGE_LIMIT]})
        if len(prompts) == MAX_PROMPTS:
            break
    return prompts
