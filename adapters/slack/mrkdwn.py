"""Slack mrkdwn for untrusted text: escaping, Markdown → mrkdwn basics, splitting within limits.

Slack parses ``<!channel>``, ``<@U123>`` and ``<https://x|text>`` from ``<…>`` sequences only, so
escaping ``&``, ``<`` and ``>`` (``&amp;``, ``&lt;``, ``&gt;``) renders every one of them inert. Model
text, tool arguments and feedback all pass through :func:`escape` before they reach Slack.
"""

from __future__ import annotations

import re

from bot.engine.model import Note
from bot.engine.roles import group_label, is_group
from bot.redaction import mask_text

MESSAGE_TEXT_LIMIT = 3_900
"""Characters per posted message: Slack advises at most 4,000 and truncates at 40,000."""

_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_ENTITY_AT_END = re.compile(r"&[a-z]{0,4}$")
_USER_ID = re.compile(r"^[UW][A-Z0-9]{2,20}$")
_FENCE = "```"


def escape(text: str) -> str:
    """Escape ``&``, ``<`` and ``>`` so nothing in ``text`` can ping, mention or link.

    >>> escape("<!channel> & <@U123> <http://evil|click>")
    '&lt;!channel&gt; &amp; &lt;@U123&gt; &lt;http://evil|click&gt;'
    """
    return "".join(_ESCAPES.get(ch, ch) for ch in text)


def escape_truncated(text: str, limit: int) -> str:
    """Escape ``text`` and cut the result to at most ``limit`` characters, never inside an entity.

    >>> escape_truncated("a<b<c<d", 9)
    'a&lt;b…'
    """
    escaped = escape(text)
    if len(escaped) <= limit:
        return escaped
    cut = escaped[: max(0, limit - 1)]
    cut = _ENTITY_AT_END.sub("", cut)
    return cut + "…"


def mention(user_id: str | None) -> str:
    """``<@U123>`` for a well-formed Slack user id, otherwise the escaped text (never a forged mention).

    >>> mention("U0123ABC"), mention("<!here>")
    ('<@U0123ABC>', '&lt;!here&gt;')
    """
    if user_id and _USER_ID.match(user_id):
        return f"<@{user_id}>"
    return escape(user_id or "someone")


def note_markup(note: Note, limit: int = MESSAGE_TEXT_LIMIT) -> str:
    """An engine's :class:`~bot.engine.model.Note` as mrkdwn: people as real mentions, groups by their name
    (never a ping), every text part escaped and secrets masked.

    >>> note_markup(Note(("Decided by ", Mention("U0ANA"), " <!here>")))
    'Decided by <@U0ANA> &lt;!here&gt;'
    """
    out = []
    for part in note.parts:
        if isinstance(part, str):
            out.append(escape_truncated(mask_text(part), limit))
        else:
            out.append(approver_markup(part.entry))
    return "".join(out)


def approver_markup(entry: str) -> str:
    """A person as a mention (Slack shows their name); a group by its name, never as a ping.

    >>> approver_markup("U0ANA"), approver_markup("usergroup:S0OPS|@ops")
    ('<@U0ANA>', '@ops')
    """
    return escape(group_label(entry)) if is_group(entry) else mention(entry)


def markdown_to_mrkdwn(text: str) -> str:
    """Untrusted Markdown (model output) → escaped Slack mrkdwn.

    Bold, italics, strike-through, headings and bullets are translated; code spans and fenced code
    are kept verbatim (escaped). Markdown links become ``text (url)`` rather than ``<url|text>``, so
    a link's visible text can never disguise where it points.

    >>> markdown_to_mrkdwn("**Done** — see [docs](https://x.io) <!here>")
    '*Done* — see docs (https://x.io) &lt;!here&gt;'
    """
    out: list[str] = []
    in_fence = False
    for line in text.split("\n"):
        if line.lstrip().startswith(_FENCE):
            in_fence = not in_fence
            out.append(escape(line))
            continue
        out.append(escape(line) if in_fence else _convert_line(line))
    return "\n".join(out)


def _convert_line(line: str) -> str:
    heading = re.match(r"^\s{0,3}#{1,6}\s+(.*)$", line)
    if heading:
        plain = re.sub(r"\*\*|__", "", heading.group(1))
        return f"*{_convert_inline(plain)}*"
    quote = re.match(r"^\s{0,3}>\s?(.*)$", line)
    if quote:
        # A bare ">" at the start of a line is mrkdwn's quote; without a "<" it cannot form a token.
        return f">{_convert_inline(quote.group(1))}"
    bullet = re.match(r"^(\s*)[-*+]\s+(.*)$", line)
    if bullet:
        return f"{bullet.group(1)}• {_convert_inline(bullet.group(2))}"
    return _convert_inline(line)


def _convert_inline(text: str) -> str:
    # Code spans are cut out first so their contents stay literal.
    parts = re.split(r"(`[^`\n]+`)", text)
    converted = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            converted.append(escape(part))
            continue
        part = re.sub(r"\[([^\]\n]+)\]\(([^)\s]+)\)", r"\1 (\2)", part)
        part = escape(part)
        part = re.sub(r"(?<!\*)\*(?!\*)([^*\n]+?)(?<!\*)\*(?!\*)", r"_\1_", part)
        part = re.sub(r"\*\*(.+?)\*\*", r"*\1*", part)
        part = re.sub(r"__(.+?)__", r"*\1*", part)
        part = re.sub(r"~~(.+?)~~", r"~\1~", part)
        converted.append(part)
    return "".join(converted)


def split_message(text: str, limit: int = MESSAGE_TEXT_LIMIT) -> list[str]:
    """Split mrkdwn ``text`` into chunks of at most ``limit`` characters.

    Cuts prefer paragraph breaks, then line breaks, then spaces; never inside an ``&…;`` entity; a
    code fence open at a cut is closed and reopened in the next chunk.

    >>> [len(c) for c in split_message("a " * 3000, limit=4000)]
    [3996, 2004]
    """
    chunks: list[str] = []
    rest = text
    reopen = ""
    budget = limit - len(_FENCE) - 1  # room to close a fence left open at the cut
    while rest:
        rest = reopen + rest
        if len(rest) <= limit:
            chunks.append(rest)
            break
        cut = _cut_point(rest, budget)
        chunk, rest = rest[:cut].rstrip("\n"), rest[cut:].lstrip("\n")
        if chunk.count(_FENCE) % 2 == 1:
            chunk += "\n" + _FENCE
            reopen = _FENCE + "\n"
        else:
            reopen = ""
        chunks.append(chunk)
    return [c for c in chunks if c.strip()] or [""]


def _cut_point(text: str, limit: int) -> int:
    window = text[:limit]
    for separator in ("\n\n", "\n", " "):
        at = window.rfind(separator)
        if at > limit // 2:
            return at + len(separator)
    entity = _ENTITY_AT_END.search(window)
    return entity.start() if entity else limit
