"""Checks a Teams request's token before the SDK's validator sees it: malformed tokens get 401, not 500.

The SDK's ``JwtTokenValidator`` reads ``kid`` from the token's header unguarded, so a token without one
raised ``KeyError`` and answered 500 with a traceback. It also refetches Microsoft's signing keys for
every unknown ``kid``, one request at a time behind a lock, so anyone could slow every token check by
sending made-up ``kid`` values. Here: a token must be a JWS with an ``RS256`` header and a ``kid``; a
``kid`` that has not validated before may trigger a key refetch at most once per
:data:`UNKNOWN_KID_INTERVAL_SECONDS`; otherwise the request is refused at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import jwt

logger = logging.getLogger(__name__)

UNKNOWN_KID_INTERVAL_SECONDS = 30.0
"""At most one request with a never-validated ``kid`` reaches the SDK (and its key refetch) per interval."""
KNOWN_KID_LIMIT = 64
"""Microsoft publishes a handful of signing keys; more known ``kid`` values than this are forgotten oldest first."""


class TokenPrecheck:
    """Remembers which ``kid`` values validated and limits how often an unknown one reaches the SDK."""

    def __init__(
        self,
        *,
        interval_seconds: float = UNKNOWN_KID_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval_seconds
        self._clock = clock
        self._known: dict[str, None] = {}
        self._last_unknown: float | None = None

    def refusal(self, authorization: str | None) -> tuple[str, str | None]:
        """``("", kid)`` when the token may go on to the SDK, else ``(reason, None)`` for a 401."""
        if authorization is None:
            return "", None  # the SDK answers: anonymous mode, or "Authorization header not found"
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "", None  # the SDK's own 401 for a header that is not a bearer token
        try:
            header = jwt.get_unverified_header(token.strip())
        except jwt.PyJWTError:
            return "the token is not a JWT", None
        kid = header.get("kid")
        if header.get("alg") != "RS256" or not isinstance(kid, str) or not kid:
            return "the token's header has no RS256 signing key id", None
        if kid in self._known:
            return "", kid
        now = self._clock()
        if self._last_unknown is not None and now - self._last_unknown < self._interval:
            return "the token names an unknown signing key (refetch limited)", None
        self._last_unknown = now
        return "", kid

    def validated(self, kid: str) -> None:
        """``kid`` belonged to a token the SDK accepted: later tokens with it pass without the limit."""
        self._known.pop(kid, None)
        self._known[kid] = None
        while len(self._known) > KNOWN_KID_LIMIT:
            self._known.pop(next(iter(self._known)))
