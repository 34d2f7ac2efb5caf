"""How a chat message is laid out in a ``messages`` row: what the row's columns hold, and the compact body.

A row holds the thread (an integer id, see ``threads``), the sequence number, the message id, the role and
a JSON body. The body is ``ChatMessage.to_dict()`` without what the row already says or the reader puts
back: the role (its own column), the id at the end of ``meta`` (the id column), and fields at their
defaults (no text, no tool calls, no result, no other meta). At 1M messages that is about half the bytes
of the full dict (bench/storage.py). Reading puts them back, so a read returns the message exactly as it
was written, ``meta`` keys in their order. A body may also be a full ``to_dict()`` (rows written by hand
or by hand-made tools): it reads the same.

Ids made by :func:`bot.messages.new_id` (32 lowercase hex digits) are stored as their 16 bytes, in the
row and in the ``(thread, id)`` index; any other id is stored as text. The two never compare equal, so
uniqueness by id is unchanged.
"""

from __future__ import annotations

import re
from typing import Any

from bot import jsonio
from bot.messages import ChatMessage, ToolCall, message_from_data
from storage.codec import dumps
from storage.errors import CorruptRecord

_HEX_ID = re.compile(r"[0-9a-f]{32}")


def id_key(message_id: Any) -> str | bytes:
    """The stored form of a message id: 16 bytes for a :func:`~bot.messages.new_id` id, else text.

    >>> id_key("0123456789abcdef0123456789abcdef")
    b'\\x01#Eg\\x89\\xab\\xcd\\xef\\x01#Eg\\x89\\xab\\xcd\\xef'
    >>> id_key("call-7")
    'call-7'
    """
    if type(message_id) is not str:
        return str(message_id)  # as the TEXT column of earlier schemas converted it
    if len(message_id) == 32:
        try:
            key = bytes.fromhex(message_id)
        except ValueError:
            return message_id
        # Only the exact lowercase form: fromhex also takes "AB" (and spaces), which would read back as "ab".
        if key.hex() == message_id:
            return key
    return message_id


def id_from_key(key: str | bytes) -> str:
    """Inverse of :func:`id_key`.

    >>> id_from_key(id_key("0123456789abcdef0123456789abcdef"))
    '0123456789abcdef0123456789abcdef'
    """
    return key.hex() if isinstance(key, bytes) else key


def compact(data: dict[str, Any], role: str, message_id: Any) -> dict[str, Any]:
    """``data`` (a message's ``to_dict()`` shape) without what a row with ``role`` and ``message_id`` restores.

    Never changes ``data`` or what it holds (``meta`` may be the message's own dict).

    >>> compact({"role": "user", "text": "hi", "tool_calls": [], "tool_call_result": None,
    ...          "meta": {"id": "m1"}}, "user", "m1")
    {'text': 'hi'}
    """
    body: dict[str, Any] = {}
    for key, value in data.items():
        if key == "role":
            if value == role:
                continue
        elif key == "text" or key == "tool_call_result":
            if value is None:
                continue
        elif key == "tool_calls":
            if type(value) is list and not value:
                continue
        elif key == "meta" and type(value) is dict and value:
            # Only a trailing id can be dropped: the reader appends it, so the keys keep their order.
            last = next(reversed(value))
            if last == "id" and type(value["id"]) is str and value["id"] == message_id:
                if len(value) == 1:
                    continue
                value = {k: v for k, v in value.items() if k != "id"}
        body[key] = value
    return body


def message_body(message: ChatMessage) -> str:
    """The JSON body stored for ``message``: :func:`compact` of its ``to_dict()``, built directly (every append).

    >>> message_body(ChatMessage.from_user("hi"))
    '{"text":"hi"}'
    """
    body: dict[str, Any] = {}
    if message.text is not None:
        body["text"] = message.text
    if message.tool_calls:
        body["tool_calls"] = [_call_data(call) for call in message.tool_calls]
    result = message.tool_call_result
    if result is not None:
        body["tool_call_result"] = {"result": result.result, "origin": _call_data(result.origin), "error": result.error}
    meta = message.meta
    if len(meta) != 1 or type(meta.get("id")) is not str:  # not just the id, which the id column holds
        last = next(reversed(meta), None)
        if last == "id" and type(meta["id"]) is str:
            meta = {k: v for k, v in meta.items() if k != "id"}
        if meta:
            body["meta"] = meta
    return dumps(body)


def _call_data(call: ToolCall) -> dict[str, Any]:
    return {"tool_name": call.tool_name, "arguments": call.arguments, "id": call.id}


def message_from_row(thread_key: str, role: str, key: str | bytes, body: str) -> ChatMessage:
    """The message a row of thread ``thread_key`` holds; :class:`CorruptRecord` naming it if it holds none."""
    try:
        data = jsonio.loads(body)
    except (TypeError, ValueError) as exc:
        raise CorruptRecord("message", f"{thread_key}/{id_from_key(key)}", f"invalid JSON ({exc})") from exc
    try:
        if "role" not in data:
            data["role"] = role
        meta = data.get("meta")
        if meta is None:
            data["meta"] = {"id": id_from_key(key)}
        elif "id" not in meta:
            meta["id"] = id_from_key(key)
        return message_from_data(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        record_id = f"{thread_key}/{id_from_key(key)}"
        raise CorruptRecord("message", record_id, f"not a chat message ({exc!r})") from exc


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"last_k must be a positive integer, not {k!r}")
    return k
