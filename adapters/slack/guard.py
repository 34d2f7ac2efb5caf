"""The gate in front of Bolt: size, signature and shape of a raw ``POST /slack/events`` request.

Bolt parses a body before it checks its signature, and its parsing and context building index into
the payload without checking types, so a garbled or oddly typed body ends in a traceback and a 500.
Every request therefore passes here first: too large → 413, not signed correctly → 401, signed but
not a payload Bolt can route → 400. Only what passes reaches Bolt (which verifies the signature again).

::

    checked = check_request(verifier, raw_body, headers)
    if isinstance(checked, Refusal):
        return web.Response(status=checked.status)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web
from slack_sdk.signature import SignatureVerifier

MAX_BODY_BYTES = 1024 * 1024
"""The largest body accepted. Slack's biggest payloads (a modal submitted with its whole view) stay far below."""

_S = (str,)
_S_NONE = (str, type(None))
_OBJ_S_NONE = (dict, str, type(None))
_ID_FIELDS: dict[str, tuple[type, ...]] = {
    # The fields Bolt's context building reads from a payload and, recursively, from its nested messages.
    "type": _S_NONE,
    "user": _OBJ_S_NONE,
    "user_id": _S_NONE,
    "team": _OBJ_S_NONE,
    "team_id": _S_NONE,
    "enterprise": _OBJ_S_NONE,
    "enterprise_id": _S_NONE,
    "is_enterprise_install": (bool, str, type(None)),
    "is_ext_shared_channel": (bool, type(None)),
    "authorizations": (list, type(None)),
    "channel": _OBJ_S_NONE,
    "channel_id": _S_NONE,
    "thread_ts": _S_NONE,
    "ts": _S_NONE,
    "text": _S_NONE,
    "view": (dict,),
    "container": (dict,),
    "function_data": (dict,),
    "response_url": _S,
    "response_urls": (list,),
    "trigger_id": _S_NONE,
    "bot_id": _S_NONE,
    "subtype": _S_NONE,
    "channel_type": _S_NONE,
    "tab": _S_NONE,
}
_INNER_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "user": {"id": _S, "team_id": _S_NONE},
    "team": {"id": _S, "enterprise_id": _S_NONE},
    "enterprise": {"id": _S_NONE},
    "channel": {"id": _S},
    "view": {"type": _S_NONE, "callback_id": _S_NONE, "team_id": _S_NONE, "app_installed_team_id": _S_NONE},
    "container": {"type": _S_NONE},
}
_NESTED = ("event", "message", "previous_message", "item", "assistant_thread")
_MAX_DEPTH = 4


@dataclass(frozen=True)
class Refusal:
    """A request that does not reach Bolt: the HTTP status to answer and why (for the log, never the client)."""

    status: int
    reason: str
    payload: dict[str, Any] | None = None
    """The parsed payload, when the request was signed and parsed but is malformed."""


@dataclass(frozen=True)
class Checked:
    """A signed request whose payload Bolt can route: the body as text, and the parsed payload."""

    body: str
    payload: dict[str, Any]


def check_request(verifier: SignatureVerifier | None, raw: bytes, headers: Mapping[str, str]) -> Checked | Refusal:
    """Verify ``raw`` (the signature first, with ``verifier``; ``None`` skips it) and parse it.

    >>> check_request(SignatureVerifier("secret"), b"{}", {})
    Refusal(status=401, reason='missing signature headers', payload=None)
    """
    if len(raw) > MAX_BODY_BYTES:
        return Refusal(413, f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        # Slack sends UTF-8; the verifier cannot check anything else, so it is not signed correctly.
        return Refusal(401, "body is not UTF-8")
    if verifier is not None:
        timestamp = headers.get("X-Slack-Request-Timestamp")
        signature = headers.get("X-Slack-Signature")
        if not timestamp or not signature:
            return Refusal(401, "missing signature headers")
        if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
            return Refusal(401, "timestamp is not a number")
        if not verifier.is_valid(body=body, timestamp=timestamp, signature=signature):
            return Refusal(401, "bad signature or stale timestamp")
    payload = parse_payload(body, headers.get("Content-Type"))
    if payload is None:
        return Refusal(400, "signed body is not a Slack payload (JSON object or form)")
    problem = payload_problem(payload)
    if problem is not None:
        return Refusal(400, f"signed payload is malformed: {problem}", payload)
    return Checked(body, payload)


def parse_payload(body: str, content_type: str | None) -> dict[str, Any] | None:
    """The payload: JSON, a form's JSON ``payload`` field, or a plain form (a slash command); ``None`` if unreadable.

    Unlike Bolt, a plain form whose text merely contains the word "payload" stays a plain form.
    """
    media_type = (content_type or "").split(";")[0].strip().lower()
    try:
        if media_type == "application/json" or body.startswith("{"):
            parsed: Any = json.loads(body)
        else:
            fields = dict(parse_qsl(body, keep_blank_values=True))
            parsed = json.loads(fields["payload"]) if "payload" in fields else fields
    except ValueError:  # JSONDecodeError, and parse_qsl on odd input
        return None
    return parsed if isinstance(parsed, dict) else None


def payload_problem(payload: Mapping[str, Any]) -> str | None:
    """What makes ``payload`` unroutable for Bolt (a field of the wrong type, a missing one), or ``None``.

    >>> payload_problem({"type": "event_callback", "event": []})
    'event: wrong type'
    """
    problem = _fields_problem(payload, "", 0)
    if problem is not None:
        return problem
    kind = payload.get("type")
    if not isinstance(kind, str) and "command" not in payload and "ssl_check" not in payload:
        return "type: missing"
    if kind == "event_callback":
        event = payload.get("event")
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            return "event: missing or without a type"
    elif kind in ("view_submission", "view_closed"):
        view = payload.get("view")
        if "user" not in payload or not isinstance(view, dict) or "type" not in view:
            return "view or user: missing"
        if not isinstance(view.get("callback_id"), str):
            return "view/callback_id: missing"
    elif kind == "block_actions":
        actions = payload.get("actions")
        if "user" not in payload or not isinstance(actions, list) or not actions:
            return "actions or user: missing"
        if not all(isinstance(a, dict) and isinstance(a.get("action_id"), str) for a in actions):
            return "actions: an action without an action_id"
    elif "command" in payload:
        if not isinstance(payload["command"], str) or not isinstance(payload.get("text", ""), str):
            return "command or text: wrong type"
        if "user_id" not in payload or "response_url" not in payload:
            return "user_id or response_url: missing"
    return None


def _fields_problem(obj: Mapping[str, Any], where: str, depth: int) -> str | None:
    for key, kinds in _ID_FIELDS.items():
        if key in obj and not isinstance(obj[key], kinds):
            return f"{where}{key}: wrong type"
    for key, inner in _INNER_FIELDS.items():
        value = obj.get(key)
        if isinstance(value, dict):
            for name, kinds in inner.items():
                if name in value and not isinstance(value[name], kinds):
                    return f"{where}{key}/{name}: wrong type"
    for url in obj.get("response_urls") or ():
        if not isinstance(url, dict) or not isinstance(url.get("response_url", ""), str):
            return f"{where}response_urls: wrong type"
    nested = [(f"authorizations/{i}", a) for i, a in enumerate(obj.get("authorizations") or ())]
    nested += [(key, obj[key]) for key in _NESTED if key in obj]
    for key, value in nested:
        if not isinstance(value, dict):
            return f"{where}{key}: wrong type"
        if depth < _MAX_DEPTH:
            problem = _fields_problem(value, f"{where}{key}/", depth + 1)
            if problem is not None:
                return problem
    return None


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes | None:
    """The request body, or ``None`` as soon as it is known to exceed ``limit`` bytes (never read in full)."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
