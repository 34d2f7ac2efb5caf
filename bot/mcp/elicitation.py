"""``elicitation/create``: a server's question during a tool call, put to the run's requester and answered.

The capability is declared by giving the SDK's :class:`mcp.ClientSession` an ``elicitation_callback`` (the SDK
then announces both form and URL mode). The callback ties the request to the one run with a call in flight on
that server (:meth:`CallsInFlight.asking`), hands it to the engine's :data:`bot.questions.Asker`, and pauses
the call's timeout while a person answers. With nobody to ask (no run, several runs, no asker) it declines.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from bot.mcp.inflight import CallsInFlight
from bot.questions import DECLINED, Answer, Asker, Question

CANCELLED = Answer("cancel")

log = logging.getLogger("countersign.mcp")


class Elicitation:
    """Builds each server's elicitation callback; :attr:`asker` is set by the engine once it exists."""

    def __init__(self, calls: CallsInFlight) -> None:
        self.calls = calls
        self.asker: Asker | None = None

    def callback(self, server: str) -> Any:
        """The ``elicitation_callback`` for ``server``'s session."""
        import mcp.types as types

        async def elicit(context: Any, params: Any) -> types.ElicitResult:
            run_id, tool = self.calls.asking(server)
            if self.asker is None or run_id is None or tool is None:
                log.warning("MCP server %s asked a question outside one run's call; declined", server)
                return types.ElicitResult(action="decline")
            if isinstance(params, types.ElicitRequestURLParams):
                question = Question(server, tool, params.message, url=params.url)
            else:
                question = Question(server, tool, params.message, schema=dict(params.requested_schema or {}))
            try:
                with self.calls.waiting_for_person(server, run_id):
                    answer = await self._until_call_ends(server, run_id, self.asker(run_id, question))
            except Exception:  # fail closed: a question that cannot be asked is declined
                log.warning("MCP server %s's question could not be asked; declined", server, exc_info=True)
                answer = DECLINED
            return _result(answer, question)

        return elicit

    async def _until_call_ends(self, server: str, run_id: str, asking: Any) -> Answer:
        """The answer, unless the call that asked ends first (stopped, timed out): then the question is withdrawn
        (its task cancelled, which closes it in the thread) and the server is told ``cancel``."""
        question = asyncio.ensure_future(asking)
        calls = self.calls.ended(server, run_id)
        await asyncio.wait([question, *calls], return_when=asyncio.FIRST_COMPLETED)
        if question.done():
            return question.result()
        question.cancel()
        await asyncio.gather(question, return_exceptions=True)
        return CANCELLED


def _result(answer: Answer, question: Question) -> Any:
    import mcp.types as types

    if answer.action == "accept" and question.url is None:
        return types.ElicitResult(action="accept", content=dict(answer.content or {}))
    return types.ElicitResult(action=answer.action)
