"""Stopping the engine closes the model client's HTTP session on its own event loop."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

from bot.llm import OpenAIChatGenerator
from tests.fakes.engine_kit import Harness
from tests.fakes.openai_server import FakeOpenAIServer


async def test_a_stopped_engine_leaves_no_unclosed_http_session_for_the_collector(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        async with FakeOpenAIServer() as openai:
            openai.enqueue_text("Hello.")
            h = await Harness.open(
                tmp_path, generator=OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
            )
            await h.say("hi")
            assert "Hello." in h.surface.replies_in(h.thread())
            await h.close()
            del h
            gc.collect()  # aiohttp reports a session still open when it is collected
            await asyncio.sleep(0)  # the report is scheduled on the loop
    finally:
        loop.set_exception_handler(previous)
    assert [c["message"] for c in reported if "nclosed" in c.get("message", "")] == []
