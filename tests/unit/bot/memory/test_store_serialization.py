"""The memory stores serialise (to_dict/from_dict) and a PostgreSQL store built from a URL opens on first use."""

from __future__ import annotations

import pytest

from bot.agent import Agent
from bot.llm import ScriptedChatGenerator
from bot.memory import PostgresMemoryStore, SQLiteMemoryStore
from bot.messages import ChatMessage
from tests.fakes.agent_kit import says


async def test_a_postgres_store_from_a_url_round_trips_and_serves_an_agent(postgres_url):
    store = PostgresMemoryStore(postgres_url)
    await store.add_memories(["our staging cluster is eu-2"], user_id="U_ANA")
    again = PostgresMemoryStore.from_dict(store.to_dict())
    assert again.to_dict() == {
        "type": "storage.postgres.memories.PostgresMemoryStore",
        "init_parameters": {"db_or_url": postgres_url},
    }
    gen = ScriptedChatGenerator([says("eu-2")])
    agent = Agent.from_dict(Agent(gen, memory_store=again).to_dict())
    await agent.run_async([ChatMessage.from_user("staging cluster?")], memory_store_kwargs={"user_id": "U_ANA"})
    assert agent.chat_generator.calls[0]["messages"][0].text == "Relevant memories:\n- our staging cluster is eu-2"
    await store.aclose()
    await again.aclose()
    await agent.memory_store.aclose()


def test_a_url_with_a_password_is_not_serialised():
    with pytest.raises(ValueError, match="PGPASSWORD"):
        PostgresMemoryStore("postgresql://bot:hunter2@db.internal/countersign").to_dict()


def test_an_in_memory_sqlite_store_is_not_serialised():
    store = SQLiteMemoryStore(":memory:")
    with pytest.raises(ValueError, match="in-memory"):
        store.to_dict()
    store.close()
