"""Text for Teams messages: untrusted content made inert, and cut to the size Teams accepts.

Teams renders message text as Markdown plus a subset of HTML: ``<at>…</at>`` (a mention, when the
activity carries a matching entity), ``<a href>`` and Markdown links ``[label](url)``. The bot never
adds mention entities, and everything below keeps untrusted text from carrying markup of its own:

* :func:`escape_text` shows a value literally (names, ids, feedback, admin answers);
* :func:`sanitize_markdown` keeps the model's Markdown formatting (bold, lists, code) but turns HTML
  into text and every link into ``label (url)`` so the target is always visible.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bot.engine.presentation import truncate
from bot.redaction import mask_text

MESSAGE_LIMIT = 20_000
"""Characters of text per message; Teams rejects messages above about 28 KB."""

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKDOWN_SPECIALS = set("\\`*_[]()~|#!")
_BRACKETS = {"[": "\\[", "]": "\\]"}
_INLINE_LINK = re.compile(r"!?\[([^\[\]\n]*)\]\(\s*<?([^()\s<>]*)>?(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)")


def escape_html(text: str) -> str:
    """``&``, ``<`` and ``>`` as entities: no ``<at>`` mention, no ``<a href>``, no HTML at all."""
    return "".join(_HTML.get(ch, ch) for ch in text)


def escape_text(text: str) -> str:
    """``text`` rendered literally by Teams: HTML and every Markdown special character escaped.

    >>> escape_text("<at>Ana</at> [x](https://evil.example)")
    '&lt;at&gt;Ana&lt;/at&gt; \\\\[x\\\\]\\\\(https://evil.example\\\\)'
    """
    out = []
    for ch in text:
        if ch in _HTML:
            out.append(_HTML[ch])
        elif ch in _MARKDOWN_SPECIALS:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _unlink(match: re.Match[str]) -> str:
    label, url = match.group(1), match.group(2)
    if not url:
        return label
    return f"{label} ({url})" if label and label != url else url


def sanitize_markdown(text: str) -> str:
    """Model Markdown made safe: formatting kept, HTML shown as text, links shown with their target.

    >>> sanitize_markdown("**Done.** See [the docs](https://evil.example) <at>everyone</at>")
    '**Done.** See the docs (https://evil.example) &lt;at&gt;everyone&lt;/at&gt;'
    """
    unlinked = _INLINE_LINK.sub(_unlink, text)
    escaped = escape_html(unlinked)
    # Whatever brackets are left could still open a reference-style link: show them literally.
    return "".join(_BRACKETS.get(ch, ch) for ch in escaped)


def fit(text: str, render: Callable[[str], str], limit: int = MESSAGE_LIMIT) -> str:
    """Truncate ``text`` so that ``render(text)`` stays within ``limit`` characters (escaping grows text)."""
    budget = limit
    while True:
        cut, _ = truncate(text, budget)
        shown = render(cut)
        if len(shown) <= limit or budget <= 64:
            return shown[:limit]
        budget //= 2


def markdown_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The model's answer as safe Markdown of at most ``limit`` characters, secrets masked."""
    return fit(mask_text(text), sanitize_markdown, limit)


def plain_message(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Untrusted text shown literally, at most ``limit`` characters, secrets masked."""
    return fit(mask_text(text), escape_text, limit)
