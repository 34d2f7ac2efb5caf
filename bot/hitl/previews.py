"""Previews: what a call would do, computed when it pauses and again before it runs (issue 30).

A tool declares ``preview=fn`` (``@tool(preview=...)``): a side-effect-free function taking the tool's
parameters. Its output is shown on the approval, and the approval binds to its digest. Before the call
runs, the preview is computed again; :func:`recheck` says whether the approved digest still matches
(run), or the call must be asked again with both previews ("changed since you approved").

A tool that declares a parameter ``approved_preview: str`` gets the approved preview's text
(:func:`run_arguments`), so that exactly the approved plan executes.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bot.durations import DurationError, duration_seconds
from bot.redaction import mask_shown_part
from bot.tools import Tool

PREVIEW_TIMEOUT_SETTING = "COUNTERSIGN_PREVIEW_TIMEOUT"
DEFAULT_PREVIEW_TIMEOUT = 10.0
CHANGED_SINCE_APPROVED = "changed since you approved"
"""The words a re-asked approval shows beside the old and the new preview (API.md)."""

APPROVED_PREVIEW_PARAMETER = "approved_preview"

PreviewStatus = Literal["ok", "failed", "timeout"]


@dataclass(frozen=True)
class Preview:
    """One computed preview: its text (``ok``) or why there is none (``failed``/``timeout``)."""

    status: PreviewStatus
    text: str
    digest: str | None
    """sha256 of the text (``ok`` only): what an approval binds to and the audit stores."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def preview_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def preview_timeout(env: Mapping[str, str]) -> float:
    """``COUNTERSIGN_PREVIEW_TIMEOUT`` in seconds (the duration syntax, ``10s`` by default).

    Raises ``ValueError`` with a one-line message naming the setting for a bad value.
    """
    raw = (env.get(PREVIEW_TIMEOUT_SETTING) or "").strip()
    if not raw:
        return DEFAULT_PREVIEW_TIMEOUT
    try:
        seconds = duration_seconds(raw, what="A preview time-out")
    except DurationError as exc:
        raise ValueError(f"{PREVIEW_TIMEOUT_SETTING}: {exc}") from None
    if seconds <= 0:
        raise ValueError(f"{PREVIEW_TIMEOUT_SETTING}: must be more than 0 (e.g. 10s)")
    return float(seconds)


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


async def compute_preview(tool: Tool, arguments: Mapping[str, Any], seconds: float) -> Preview | None:
    """Run ``tool.preview`` with the call's arguments, at most ``seconds``; ``None`` without one.

    A sync preview runs in a worker thread (the event loop keeps serving other calls); one that overruns
    is reported as ``timeout`` (its thread is left to finish, its result ignored). Any exception is
    ``failed`` with its type and message, never a traceback.
    """
    fn = tool.preview
    if fn is None:
        return None
    kwargs = dict(arguments)
    try:
        if inspect.iscoroutinefunction(fn):
            value = await asyncio.wait_for(fn(**kwargs), seconds)
        else:
            value = await asyncio.wait_for(asyncio.to_thread(fn, **kwargs), seconds)
            if inspect.isawaitable(value):
                value = await asyncio.wait_for(value, seconds)
    except TimeoutError:
        return Preview("timeout", f"The preview did not finish within {seconds:g}s.", None)
    except Exception as exc:  # noqa: BLE001 - any failure of a user's preview is shown, not raised
        return Preview("failed", f"The preview failed: {type(exc).__name__}: {exc}"[:500], None)
    text = _as_text(value)
    return Preview("ok", text, preview_digest(text))


def approval_refusal(tool: Tool, preview: Preview | None) -> str | None:
    """Why this call may not be approved now (``preview_required`` without a good preview), else ``None``."""
    if not tool.preview_required:
        return None
    if preview is None:
        return f"{tool.name} needs a preview before it can be approved, and it has none."
    if preview.status == "timeout":
        return f"{tool.name} needs a preview before it can be approved, and its preview timed out."
    if preview.status == "failed":
        return f"{tool.name} needs a preview before it can be approved, and its preview failed."
    return None


@dataclass(frozen=True)
class Recheck:
    """The outcome of computing the preview again just before the call runs."""

    run: bool
    fresh: Preview | None
    reason: str
    """Empty when ``run``; otherwise the sentence the re-ask and the audit show."""


def recheck(tool: Tool, approved_digest: str | None, fresh: Preview | None) -> Recheck:
    """Whether an approved call may run given the preview computed again now.

    It runs only if the fresh preview's digest equals the approved one (or the tool has no preview at
    all). A failed or timed-out re-check never runs a call approved on a good preview.
    """
    if tool.preview is None:
        return Recheck(True, None, "")
    if fresh is None or not fresh.ok:
        if approved_digest is None and not tool.preview_required:
            return Recheck(True, fresh, "")  # approved knowing there was no preview; still none
        status = "missing" if fresh is None else fresh.status
        return Recheck(False, fresh, f"The preview could not be computed again ({status}); it must be approved again.")
    if fresh.digest == approved_digest:
        return Recheck(True, fresh, "")
    return Recheck(False, fresh, f"The preview {CHANGED_SINCE_APPROVED}.")


def takes_approved_preview(tool: Tool) -> bool:
    try:
        return APPROVED_PREVIEW_PARAMETER in inspect.signature(tool.function).parameters
    except (TypeError, ValueError):
        return False


def run_arguments(tool: Tool, arguments: Mapping[str, Any], approved: Preview | None) -> dict[str, Any]:
    """The keyword arguments the tool runs with: the approved ones, plus ``approved_preview`` if it takes it."""
    kwargs = dict(arguments)
    kwargs.pop(APPROVED_PREVIEW_PARAMETER, None)  # never the model's
    if takes_approved_preview(tool) and approved is not None and approved.ok:
        kwargs[APPROVED_PREVIEW_PARAMETER] = approved.text
    return kwargs


def shown_preview(preview: Preview, limit: int) -> tuple[str, bool]:
    """The preview as an approval shows it: secrets masked, cut to ``limit`` characters (as results are).

    Returns the text and whether it was cut (a surface offers "show more" then).
    """
    text = mask_shown_part(preview.text, limit) if preview.ok else preview.text
    if len(text) <= limit:
        return text, False
    note = f"… (+{len(text) - limit} chars)"
    return text[: max(0, limit - len(note))] + note, True


def reask_text(old: Preview, new: Preview, limit: int) -> str:
    """The body of a re-asked approval: the approved preview beside the new one."""
    before, _ = shown_preview(old, limit)
    after, _ = shown_preview(new, limit)
    return f"The preview {CHANGED_SINCE_APPROVED}.\nApproved:\n{before}\nNow:\n{after}"
