"""Masking of secret values before anything is shown, logged or echoed in an error.

Two ways to spot a secret, both replacing it by :data:`MASK`:

- **by name**: keys named like ``token``, ``secret``, ``password``, ``api_key`` (and a few relatives)
  hold secrets (:func:`mask_secrets`, :func:`is_secret_key`);
- **by value**, in free text (:func:`mask_text`): ``key=value`` / ``key: value`` with a secret-looking
  key, ``Authorization: Bearer …`` and other bearer credentials, passwords in URLs, private-key blocks,
  and well-known token formats (OpenAI ``sk-…``, Slack ``xox?-…``, GitHub ``ghp_…`` /
  ``github_pat_…``, AWS ``AKIA…``, JWTs).

:func:`mask_for_display` does both, at any depth. The full values stay in storage and reach the tool
unchanged: only what is shown is masked.

The value patterns are our own small set rather than ``detect-secrets``' plugins: those report matched
values, not positions (some only a prefix group, e.g. ``ghp``), miss current OpenAI keys (``sk-proj-…``),
flag ordinary words and git SHAs through their entropy plugins, and bring ``requests`` and PyYAML.
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "••••••"

_SECRET_KEY = re.compile(
    r"(token|secret|passw(or)?d|passphrase|api[_-]?key|apikey|private[_-]?key|credential|auth)", re.IGNORECASE
)


def is_secret_key(key: str) -> bool:
    """Whether a parameter named ``key`` holds a secret.

    >>> is_secret_key("GITHUB_TOKEN"), is_secret_key("path")
    (True, False)
    """
    return bool(_SECRET_KEY.search(key))


# --- by value ---------------------------------------------------------------------------------------

# A secret-looking key ends in one of these words ("GITHUB_TOKEN", "db.password", "client-secret");
# "tokens", "max_tokens", "token_count" and "author" do not, so ordinary text keeps its numbers.
_KEY_WORDS = (
    r"token|secret|secret[_-]?key|passw(?:or)?d|pwd|passphrase|api[_-]?key|apikey|private[_-]?key"
    r"|access[_-]?key|credentials?|auth|session[_-]?id|cookie"
)
_KEY_VALUE = re.compile(
    rf"""(?<![\w.-])(?P<key>[\w.-]*?(?:{_KEY_WORDS}))(?![\w-])["']?[ \t]*(?P<sep>:=|=|:)[ \t]*"""
    r"""(?:(?P<quote>["'])(?P<quoted>[^"'\n]+)(?P=quote)|(?P<value>[^\s"',;&)}\]]+))""",
    re.IGNORECASE,
)
_AUTHORIZATION = re.compile(
    r"""\b(?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?"""
    r"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?(?P<value>[^\s\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(?:bearer|basic)[ \t]+(?P<value>[A-Za-z0-9._~+/-]+=*)", re.IGNORECASE)
# The scheme is bounded (and may not start inside a word): an unbounded one rescans "a.a.a.…" quadratically.
_URL_PASSWORD = re.compile(
    r"(?<![\w+.-])[a-z][a-z0-9+.-]{0,30}://[^\s/:@]{1,256}:(?P<value>[^\s/@]{1,256})@", re.IGNORECASE
)
_PRIVATE_KEY = re.compile(
    r"(?P<value>-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END[A-Z ]*PRIVATE KEY( BLOCK)?-----|\Z))",
    re.DOTALL,
)
_TOKEN_FORMATS = re.compile(
    r"(?<![\w-])(?P<value>"
    r"sk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI (and Anthropic) API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|xapp-\d-[A-Za-z0-9-]{10,}"  # Slack bot/user/app tokens
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub tokens
    r"|(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"  # AWS access key ids
    r"|eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"  # JWTs (header.payload.signature)
    r")(?![\w-])"
)


def _looks_like_a_credential(value: str) -> bool:
    """Whether a bare word after ``key:`` / ``Bearer`` is a credential rather than ordinary prose.

    ``password: hunter2`` and ``token: 8f3a…`` are; ``Token: expired`` and ``bearer of news`` are not.
    """
    if value == MASK or MASK in value:
        return False
    return len(value) >= 12 or any(not ch.isalpha() for ch in value)


def _spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for pattern in (_PRIVATE_KEY, _TOKEN_FORMATS, _URL_PASSWORD, _AUTHORIZATION):
        spans.extend(m.span("value") for m in pattern.finditer(text))
    for m in _BEARER.finditer(text):
        if _looks_like_a_credential(m.group("value")):
            spans.append(m.span("value"))
    for m in _KEY_VALUE.finditer(text):
        if m.group("quoted") is not None:
            spans.append(m.span("quoted"))
            continue
        # A sentence's closing punctuation is not part of the value ("the password: hunter2.").
        value = m.group("value").rstrip(".!?:")
        start = m.start("value")
        # "key=value" is an assignment whatever the value; "key: value" may be prose ("Token: expired.").
        if value and (m.group("sep") != ":" or _looks_like_a_credential(value)):
            spans.append((start, start + len(value)))
    return spans


_CACHED_TEXT_LIMIT = 64 * 1024
"""Texts up to this size are remembered (at most 128 of them): a renderer fitting a message to a size
budget shows the same long values again and again."""


def mask_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by :data:`MASK` (keys and the rest stay).

    >>> mask_text("curl -H 'Authorization: Bearer abc.def.ghi' https://x.io?api_key=s3cr3t&page=2")
    "curl -H 'Authorization: Bearer ••••••' https://x.io?api_key=••••••&page=2"
    >>> mask_text("Deleted 3 files in /var/log; 1,500 tokens used.")
    'Deleted 3 files in /var/log; 1,500 tokens used.'
    """
    if len(text) <= _CACHED_TEXT_LIMIT:
        return _mask_text_cached(text)
    return _mask_text(text)


def mask_shown_part(text: str, shown: int) -> str:
    """:func:`mask_text` for a text of which at most the first ``shown`` characters will be shown.

    Only those (and a margin, so a secret across the cut is still recognised) are masked; the rest is
    kept as is for its length, which the caller reports ("+59500 chars") but never shows.
    """
    window = shown + 4_096
    if len(text) <= window:
        return mask_text(text)
    return mask_text(text[:window]) + text[window:]


@functools.lru_cache(maxsize=128)
def _mask_text_cached(text: str) -> str:
    return _mask_text(text)


def _mask_text(text: str) -> str:
    if not text:
        return text
    spans = sorted(s for s in _spans(text) if s[1] > s[0])
    if not spans:
        return text
    out, position = [], 0
    for start, end in spans:
        if end <= position:
            continue  # inside a span already masked
        start = max(start, position)
        out.append(text[position:start])
        out.append(MASK)
        position = end
    out.append(text[position:])
    return "".join(out)


def mask_for_display(value: Any) -> Any:
    """A copy of ``value`` masked for showing to people: by key name and by value, at any depth.

    >>> mask_for_display({"password": "x", "cmd": "export GITHUB_TOKEN=ghp_x1"})
    {'password': '••••••', 'cmd': 'export GITHUB_TOKEN=••••••'}
    """
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and is_secret_key(k) else mask_for_display(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_for_display(v) for v in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


# --- by name --------------------------------------------------------------------------------------


def mask_secrets(value: Any) -> Any:
    """Return a copy of ``value`` with every secret-named key's value masked, at any depth."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and is_secret_key(k) else mask_secrets(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v) for v in value]
    return value


def secret_values(arguments: Any) -> list[str]:
    """Every non-empty string stored under a secret-named key, at any depth (to scrub from error text)."""
    found: list[str] = []
    if isinstance(arguments, dict):
        for k, v in arguments.items():
            if isinstance(k, str) and is_secret_key(k) and v not in (None, ""):
                found.append(str(v))
            else:
                found.extend(secret_values(v))
    elif isinstance(arguments, list):
        for v in arguments:
            found.extend(secret_values(v))
    return found


def scrub(text: str, arguments: Any) -> str:
    """Replace every secret argument value that appears in ``text`` by :data:`MASK`."""
    for secret in sorted(secret_values(arguments), key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, MASK)
    return text
