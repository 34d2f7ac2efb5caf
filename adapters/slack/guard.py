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
from jsonschema import Draft202012Validator
from slack_sdk.signature import SignatureVerifier

MAX_BODY_BYTES = 1024 * 1024
"""The largest body accepted. Slack's biggest payloads (a modal submitted with its whole view) stay far below."""

_STR = {"type": "string"}
_STR_OR_NULL = {"type": ["string", "null"]}
_IDS = {
    # The fields Bolt's context building reads from the payload and, recursively, from these nested objects.
    "type": "object",
    "properties": {
        "type": _STR_OR_NULL,
        "user": {"type": ["object", "string", "null"], "properties": {"id": _STR, "team_id": _STR_OR_NULL}},
        "user_id": _STR_OR_NULL,
        "team": {"type": ["object", "string", "null"], "properties": {"id": _STR, "enterprise_id": _STR_OR_NULL}},
        "team_id": _STR_OR_NULL,
        "enterprise": {"type": ["object", "string", "null"], "properties": {"id": _STR_OR_NULL}},
        "enterprise_id": _STR_OR_NULL,
        "is_enterprise_install": {"type": ["boolean", "string", "null"]},
        "is_ext_shared_channel": {"type": ["boolean", "null"]},
        "authorizations": {"type": ["array", "null"], "items": {"$ref": "#/$defs/ids"}},
        "channel": {"type": ["object", "string", "null"], "properties": {"id": _STR}},
        "channel_id": _STR_OR_NULL,
        "thread_ts": _STR_OR_NULL,
        "ts": _STR_OR_NULL,
        "text": _STR_OR_NULL,
        "event": {"$ref": "#/$defs/ids"},
        "message": {"$ref": "#/$defs/ids"},
        "previous_message": {"$ref": "#/$defs/ids"},
        "item": {"$ref": "#/$defs/ids"},
        "assistant_thread": {"$ref": "#/$defs/ids"},
        "function_data": {"type": "object"},
        "view": {
            "type": "object",
            "properties": {"type": _STR_OR_NULL, "callback_id": _STR_OR_NULL, "team_id": _STR_OR_NULL},
        },
        "container": {"type": "object", "properties": {"type": _STR_OR_NULL}},
        "response_url": _STR,
        "response_urls": {"type": "array", "items": {"type": "object", "properties": {"response_url": _STR}}},
        "trigger_id": _STR_OR_NULL,
        "bot_id": _STR_OR_NULL,
        "subtype": _STR_OR_NULL,
        "channel_type": _STR_OR_NULL,
        "tab": _STR_OR_NULL,
    },
}
_PAYLOAD_SCHEMA = {
    "$defs": {"ids": _IDS},
    "allOf": [
        {"$ref": "#/$defs/ids"},
        {"properties": {"type": _STR}},
        {"anyOf": [{"required": ["type"]}, {"required": ["command"]}, {"required": ["ssl_check"]}]},
        {
            "if": {"properties": {"type": {"const": "event_callback"}}, "required": ["type"]},
            "then": {
                "required": ["event"],
                "properties": {"event": {"required": ["type"], "properties": {"type": _STR}}},
            },
        },
        {
            "if": {"properties": {"type": {"enum": ["view_submission", "view_closed"]}}, "required": ["type"]},
            "then": {
                "required": ["view", "user"],
                "properties": {"view": {"required": ["callback_id", "type"], "properties": {"callback_id": _STR}}},
            },
        },
        {
            "if": {"properties": {"type": {"const": "block_actions"}}, "required": ["type"]},
            "then": {
                "required": ["user", "actions"],
                "properties": {
                    "actions": {
                        "type": "array",
                        "minItems": 1,
                        "items": {"type": "object", "required": ["action_id"], "properties": {"action_id": _STR}},
                    }
                },
            },
        },
        {
            "if": {"required": ["command"]},
            "then": {"required": ["user_id", "response_url"], "properties": {"command": _STR, "text": _STR}},
        },
    ],
}
_VALIDATOR = Draft202012Validator(_PAYLOAD_SCHEMA)


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
    Refusal(status=401, reason='missing signature headers')
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
    """The payload as Bolt reads it (JSON, ``payload=<json>`` form, or a plain form); ``None`` if unreadable."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    try:
        if media_type == "application/json" or body.startswith("{"):
            parsed: Any = json.loads(body)
        elif "payload" in body:  # Bolt's own test: a form carrying a JSON ``payload`` field
            parsed = json.loads(dict(parse_qsl(body, keep_blank_values=True)).get("payload", "{}"))
        else:
            parsed = dict(parse_qsl(body, keep_blank_values=True))
    except ValueError:  # JSONDecodeError, and parse_qsl on odd input
        return None
    return parsed if isinstance(parsed, dict) else None


def payload_problem(payload: Mapping[str, Any]) -> str | None:
    """What makes ``payload`` unroutable for Bolt (a field of the wrong type, a missing one), or ``None``."""
    error = next(iter(_VALIDATOR.iter_errors(payload)), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "payload"
    return f"{where}: {error.validator} check failed"


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
