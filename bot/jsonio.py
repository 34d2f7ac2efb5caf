"""Fast JSON for snapshots and stored records: orjson, with the standard library behind it.

orjson encodes and decodes several times faster than :mod:`json`, which snapshots and stored messages
cross on every pause, resume and history read. Whatever orjson refuses goes through :mod:`json` as
before, so the output and the errors stay those of ``json.dumps(..., ensure_ascii=False)`` (compact
separators) and text written by the standard library (``NaN``, integers beyond 64 bits) still loads.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# Refuse what json refuses (dataclasses, datetimes): their default function raises, and json then
# decides. Non-string keys are converted as json converts them.
_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def dumps(value: Any) -> str:
    """Compact JSON text, UTF-8 kept as is; ``TypeError`` for what :func:`json.dumps` cannot encode.

    >>> dumps({"a": [1, "é"]})
    '{"a":[1,"é"]}'
    """
    try:
        return orjson.dumps(value, option=_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError: exotic values (big ints, lone surrogates...) or a real error
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    """Parse JSON text; ``ValueError`` (a :class:`json.JSONDecodeError`) if it is not JSON.

    >>> loads('{"a": NaN}')["a"] != 0
    True
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)  # NaN/Infinity written by json, or not JSON at all (json raises)
