"""Masking of secret values before anything is shown, logged or echoed in an error.

Keys named like ``token``, ``secret``, ``password``, ``api_key`` (and a few relatives) hold secrets;
their values are replaced by :data:`MASK` wherever arguments are displayed. The full values stay in
storage and reach the tool unchanged.
"""

from __future__ import annotations

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
