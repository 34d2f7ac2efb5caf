"""Canonical JSON and argument digests.

A decision is bound to one tool call and a digest of its canonical arguments, so two spellings of the
same arguments (key order, whitespace) give the same digest and any change gives another.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialise ``value`` deterministically: sorted keys, no whitespace, UTF-8 kept as is.

    >>> canonical_json({"b": 1, "a": [1, 2]})
    '{"a":[1,2],"b":1}'
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def args_digest(arguments: dict[str, Any]) -> str:
    """The SHA-256 hex digest of the canonical JSON of ``arguments``."""
    return hashlib.sha256(canonical_json(arguments).encode("utf-8")).hexdigest()
