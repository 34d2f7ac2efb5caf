"""Requests shaped and signed like Slack's, sent over real HTTP to a Bolt app's ``/slack/events``.

Signatures come from ``slack_sdk.signature.SignatureVerifier.generate_signature``, exactly what Slack
computes, so the app under test verifies them with its real middleware::

    slack = SlackRequests(url, "signing-secret", session)
    reply = await slack.event(slack.mention("U1", "C1", "<@U0BOT> hello"))
    assert reply.status == 200
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier


@dataclass(frozen=True)
class SlackReply:
    """What the app answered: status, body text and the time it took (seconds)."""

    status: int
    text: str
    seconds: float

    def json(self) -> Any:
        """The body as JSON (``None`` for an empty body)."""
        return json.loads(self.text) if self.text else None


@dataclass
class SlackRequests:
    """Builds and sends signed Slack requests; message timestamps and ids are unique per instance."""

    url: str
    signing_secret: str
    session: aiohttp.ClientSession
    team_id: str = "T0TEAM"
    api_app_id: str = "A0APP"
    _counter: Any = field(default_factory=lambda: itertools.count(1))

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        body: str,
        content_type: str,
        *,
        headers: dict[str, str] | None = None,
        timestamp: int | None = None,
        signature: str | None = None,
    ) -> SlackReply:
        """POST ``body`` signed with the signing secret (or with the given bad ``signature``)."""
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        verifier = SignatureVerifier(self.signing_secret)
        signed = verifier.generate_signature(timestamp=stamp, body=body) if signature is None else signature
        all_headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": signed,
            **(headers or {}),
        }
        started = time.perf_counter()
        async with self.session.post(self.url, data=body.encode(), headers=all_headers) as response:
            text = await response.text()
        return SlackReply(response.status, text, time.perf_counter() - started)

    async def event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_num: int | None = None, **send_options: Any
    ) -> SlackReply:
        """An Events API callback; ``retry_num`` adds Slack's retry headers."""
        body = {
            "token": "legacy",
            "team_id": self.team_id,
            "api_app_id": self.api_app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._counter):08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": self.team_id, "user_id": "U0BOT", "is_bot": True}],
        }
        headers = dict(send_options.pop("headers", None) or {})
        if retry_num is not None:
            headers.update({"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"})
        return await self.send(json.dumps(body), "application/json", headers=headers, **send_options)

    async def interaction(self, payload: dict[str, Any], **send_options: Any) -> SlackReply:
        """An interactivity payload (``payload=<json>``, form-encoded, like Slack)."""
        body = urlencode({"payload": json.dumps(payload)})
        return await self.send(body, "application/x-www-form-urlencoded", **send_options)

    # ------------------------------------------------------------------ events

    def next_ts(self) -> str:
        """A fresh message timestamp."""
        return f"1710000000.{next(self._counter):06d}"

    def mention(
        self, user: str, channel: str, text: str, *, thread_ts: str | None = None, ts: str | None = None
    ) -> dict[str, Any]:
        """An ``app_mention`` event."""
        event = {
            "type": "app_mention",
            "user": user,
            "channel": channel,
            "text": text,
            "ts": ts or self.next_ts(),
            "team": self.team_id,
            "event_ts": ts,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def message(
        self,
        user: str,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        ts: str | None = None,
        channel_type: str = "channel",
        **extra: Any,
    ) -> dict[str, Any]:
        """A ``message`` event (``channel_type="im"`` for a DM; ``extra`` for subtype, bot_id, …)."""
        event = {
            "type": "message",
            "user": user,
            "channel": channel,
            "text": text,
            "ts": ts or self.next_ts(),
            "team": self.team_id,
            "channel_type": channel_type,
            **extra,
        }
        if thread_ts:
            event["thread_ts"] = thread_ts
        return event

    def home_opened(self, user: str) -> dict[str, Any]:
        """An ``app_home_opened`` event for the Home tab."""
        return {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home", "event_ts": self.next_ts()}

    # ------------------------------------------------------------------ interactivity

    async def click(
        self,
        action_id: str,
        value: str,
        *,
        user: str,
        channel: str,
        message_ts: str,
        thread_ts: str | None = None,
        ephemeral: bool = False,
        response_url: str = "http://127.0.0.1:9/unused",
        **send_options: Any,
    ) -> SlackReply:
        """A button click on a message (``ephemeral``: on a private note, answered through ``response_url``)."""
        message = {"type": "message", "ts": message_ts, "text": "approval", "user": "U0BOT"}
        if thread_ts:
            message["thread_ts"] = thread_ts
        payload = {
            **self.interaction_base("block_actions", user),
            "container": {
                "type": "message",
                "message_ts": message_ts,
                "channel_id": channel,
                "is_ephemeral": ephemeral,
            },
            "channel": {"id": channel, "name": "ops"},
            "message": message,
            "response_url": response_url,
            "actions": [self._button(action_id, value)],
        }
        return await self.interaction(payload, **send_options)

    async def home_click(self, action_id: str, value: str, *, user: str) -> SlackReply:
        """A button click in the App Home tab."""
        payload = {
            **self.interaction_base("block_actions", user),
            "container": {"type": "view", "view_id": "VHOME"},
            "view": {"id": "VHOME", "type": "home", "blocks": []},
            "actions": [self._button(action_id, value)],
        }
        return await self.interaction(payload)

    async def submit(self, view: dict[str, Any], values: dict[str, dict[str, Any]], *, user: str) -> SlackReply:
        """Submit a modal the app opened (``view`` as sent to ``views.open``) with ``state.values``."""
        payload = {
            **self.interaction_base("view_submission", user),
            "view": {**view, "id": "VMODAL", "state": {"values": values}},
        }
        return await self.interaction(payload)

    async def command(self, text: str, *, user: str, channel: str, response_url: str) -> SlackReply:
        """``/countersign <text>``."""
        body = urlencode(
            {
                "token": "legacy",
                "team_id": self.team_id,
                "team_domain": "test",
                "channel_id": channel,
                "channel_name": "ops",
                "user_id": user,
                "user_name": user.lower(),
                "command": "/countersign",
                "text": text,
                "api_app_id": self.api_app_id,
                "response_url": response_url,
                "trigger_id": f"trig-{next(self._counter)}",
            }
        )
        return await self.send(body, "application/x-www-form-urlencoded")

    def interaction_base(self, kind: str, user: str) -> dict[str, Any]:
        """The envelope every interactivity payload of ``kind`` from ``user`` shares (team, user, trigger id)."""
        return {
            "type": kind,
            "team": {"id": self.team_id, "domain": "test"},
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_id},
            "api_app_id": self.api_app_id,
            "token": "legacy",
            "trigger_id": f"trig-{next(self._counter)}",
        }

    def _button(self, action_id: str, value: str) -> dict[str, Any]:
        return {
            "type": "button",
            "action_id": action_id,
            "block_id": f"cs_actions:{value}",
            "value": value,
            "action_ts": str(time.time()),
        }


def text_input(value: str | None) -> dict[str, Any]:
    """The ``state.values`` entry of a plain text input."""
    return {"type": "plain_text_input", "value": value}


def number_input(value: str | None) -> dict[str, Any]:
    """The ``state.values`` entry of a number input."""
    return {"type": "number_input", "value": value}


def select(option: dict[str, Any] | None) -> dict[str, Any]:
    """The ``state.values`` entry of a static select (``option`` as found in the modal's ``options``)."""
    return {"type": "static_select", "selected_option": option}


def form(action_id: str = "value", **fields: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``state.values`` of a modal whose input blocks are named like ``fields``, all with ``action_id``."""
    return {block_id: {action_id: state} for block_id, state in fields.items()}
