"""The model client's HTTP over aiohttp: an ``httpx2`` transport, so the ``openai`` client is unchanged above it.

The client's own transport (httpcore) probes the socket of every idle connection in its pool each time a
request starts or ends; under a burst of conversations that, with its per-request bookkeeping, cost more
CPU than the rest of the model call. aiohttp's pool hands out a kept-alive connection without probing the
others. Failures reach the client as the ``httpx2`` exceptions it expects, so its retries, its time-outs
and its errors (``APITimeoutError``, ``APIConnectionError``) are what they were::

    client = openai.AsyncOpenAI(http_client=AiohttpClient())
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import httpx2
import openai

READ_SIZE = 16 * 1024


@contextlib.contextmanager
def httpx_errors() -> Iterator[None]:
    """aiohttp's failures as the ``httpx2`` exceptions httpcore raises for the same causes."""
    try:
        yield
    except aiohttp.ConnectionTimeoutError as err:  # connecting, or waiting for a free connection
        raise httpx2.ConnectTimeout(str(err) or "timed out connecting") from err
    except (aiohttp.ServerTimeoutError, TimeoutError) as err:  # no byte within the read timeout
        raise httpx2.ReadTimeout(str(err) or "timed out reading") from err
    except (aiohttp.InvalidUrlClientError, aiohttp.NonHttpUrlClientError) as err:
        raise httpx2.UnsupportedProtocol(str(err)) from err
    except aiohttp.ClientConnectorError as err:  # refused, unreachable, no such host, TLS handshake
        raise httpx2.ConnectError(str(err)) from err
    except aiohttp.ServerDisconnectedError as err:
        raise httpx2.RemoteProtocolError(str(err) or "Server disconnected without sending a response.") from err
    except aiohttp.ClientPayloadError as err:  # the body ended before it was complete
        raise httpx2.RemoteProtocolError(str(err) or "peer closed connection without a complete body") from err
    except aiohttp.ClientError as err:  # a reset connection, a malformed response
        raise httpx2.ReadError(str(err) or type(err).__name__) from err


class _Body(httpx2.AsyncByteStream):
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with httpx_errors():
            async for data in self._response.content.iter_chunked(READ_SIZE):
                yield data

    async def aclose(self) -> None:
        self._response.release()  # back to the pool once read to its end; closed if not


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """Sends ``httpx2`` requests with one aiohttp session (made on first use, on the running event loop)."""

    def __init__(self, limits: httpx2.Limits, verify: Any = True, cert: Any = None, trust_env: bool = True) -> None:
        self._ssl = httpx2.create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._limits.max_connections or 0,
                keepalive_timeout=self._limits.keepalive_expiry,
                ssl=self._ssl,
            )
            # No cookies (httpx2 keeps the client's), no decompression (httpx2 decodes the body itself).
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False
            )
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        timeout = request.extensions.get("timeout", {})
        body = await request.aread()
        with httpx_errors():
            response = await self._open_session().request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body or None,
                allow_redirects=False,  # httpx2 follows redirects itself
                skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=timeout.get("pool"),
                    sock_connect=timeout.get("connect"),
                    sock_read=timeout.get("read"),
                ),
                server_hostname=request.extensions.get("sni_hostname"),
            )
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if response.reason:
            extensions["reason_phrase"] = response.reason.encode()
        return httpx2.Response(
            status_code=response.status,
            headers=response.raw_headers,
            stream=_Body(response),
            request=request,
            extensions=extensions,
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class AiohttpClient(openai.DefaultAsyncHttpxClient):
    """The ``openai`` client's default HTTP client (its time-out, limits, redirects, proxies from the
    environment), its direct connections made by :class:`AiohttpTransport`."""

    def _init_transport(
        self,
        verify: Any = True,
        cert: Any = None,
        trust_env: bool = True,
        http1: bool = True,
        http2: bool = False,
        limits: httpx2.Limits = openai.DEFAULT_CONNECTION_LIMITS,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> httpx2.AsyncBaseTransport:
        if transport is not None:
            return transport
        return AiohttpTransport(limits, verify=verify, cert=cert, trust_env=trust_env)
