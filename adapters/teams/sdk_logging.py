"""The Agents SDK's own logging, made quiet: WARNING and up, and its anonymous-mode warning said once.

At INFO the SDK logs every connector call ("Replying to activity …") and prints its ``Connections: [...]``
block at start. In anonymous mode it warns "App ID is not provided…" on every outgoing call (38 lines in
one Playground run). :func:`quiet_sdk_logging` keeps the SDK's loggers at WARNING (unless countersign
itself logs at DEBUG) and lets that one warning through once per process.
"""

from __future__ import annotations

import logging

SDK_LOGGER = "microsoft_agents"
APP_ID_WARNING = "App ID is not provided"
USER_TOKEN_CLIENT_LOGGER = "microsoft_agents.hosting.core.connector.client.user_token_client"


class _Once(logging.Filter):
    """Passes the first record whose message starts with ``prefix``; drops the later ones."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.seen = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(self.prefix):
            return True
        if self.seen:
            return False
        self.seen = True
        return True


_APP_ID_ONCE = _Once(APP_ID_WARNING)


def quiet_sdk_logging() -> None:
    """Keep the SDK at WARNING (DEBUG stays DEBUG) and say its "App ID is not provided" warning once."""
    sdk = logging.getLogger(SDK_LOGGER)
    if logging.getLogger().getEffectiveLevel() > logging.DEBUG and sdk.level in (logging.NOTSET, logging.INFO):
        sdk.setLevel(logging.WARNING)
    tokens = logging.getLogger(USER_TOKEN_CLIENT_LOGGER)
    if _APP_ID_ONCE not in tokens.filters:
        tokens.addFilter(_APP_ID_ONCE)
