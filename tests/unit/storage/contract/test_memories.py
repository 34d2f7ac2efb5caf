"""Long-term memories on both backends: scoping, filters, ranking, idempotent adds, deletes, masking."""

from __future__ import annotations

import pytest

from bot.memory import FilterError, Memory
from bot.messages import ChatMessage

FACTS = [
    "checkout deploys need two approvers",
    "our staging cluster is eu-2",
    "Ana owns the billing service",
    "the on-call rotation changes every Monday",
    "nginx logs are kept for thirty days",
]


def channel(name: str) -> dict:
    return {"field": "meta.channel", "operator": "==", "value": name}


async def texts(found: list[Memory]) -> list[str]:
    return [m.text for m in found]


async def test_the_memory_that_answers_the_question_ranks_first(storage):
    await storage.memories.add_memories(FACTS, user_id="U_ANA")
    found = await storage.memories.search_memories("which staging cluster do we use?", user_id="U_ANA")
    assert found[0].text == "our staging cluster is eu-2"
    assert found[0].score > 0
    approvers = await storage.memories.search_memories("how many approvers for a checkout deploy", user_id="U_ANA")
    assert approvers[0].text == "checkout deploys need two approvers"
    assert all(a.score >= b.score for a, b in zip(approvers, approvers[1:], strict=False))


async def test_the_words_of_a_query_are_or_ed(storage):
    await storage.memories.add_memories(FACTS, user_id="U_ANA")
    found = await storage.memories.search_memories("billing nginx unrelatedword", user_id="U_ANA", top_k=5)
    assert sorted(await texts(found)) == ["Ana owns the billing service", "nginx logs are kept for thirty days"]


async def test_unrelated_memories_are_not_returned(storage):
    await storage.memories.add_memories(FACTS, user_id="U_ANA")
    assert await storage.memories.search_memories("kubernetes quota", user_id="U_ANA") == []


async def test_top_k_limits_and_a_bad_top_k_is_refused(storage):
    await storage.memories.add_memories([f"deploy note {i}" for i in range(8)], user_id="U_ANA")
    assert len(await storage.memories.search_memories("deploy", user_id="U_ANA", top_k=3)) == 3
    for bad in (0, -1, "3", True):
        with pytest.raises(ValueError):
            await storage.memories.search_memories("deploy", top_k=bad)


async def test_one_persons_memories_never_reach_another(storage):
    await storage.memories.add_memories(["my laptop password hint is the cat"], user_id="U_ANA")
    await storage.memories.add_memories(["staging cluster is eu-2"], user_id="U_BOB")
    assert await storage.memories.search_memories("laptop cat", user_id="U_BOB") == []
    found = await storage.memories.search_memories("laptop cat", user_id="U_ANA")
    assert [m.user_id for m in found] == ["U_ANA"]
    assert await storage.memories.count_memories(user_id="U_BOB") == 1


async def test_channel_memories_stay_in_their_channel(storage):
    await storage.memories.add_memories(["deploys freeze on Fridays"], metadata={"channel": "C1"})
    await storage.memories.add_memories(["deploys are continuous"], metadata={"channel": "C2"})
    found = await storage.memories.search_memories("deploys", filters=channel("C1"))
    assert await texts(found) == ["deploys freeze on Fridays"]
    assert found[0].metadata == {"channel": "C1"}
    assert await storage.memories.count_memories(filters=channel("C2")) == 1


async def test_run_scratch_memories_are_seen_only_by_a_search_naming_the_run(storage):
    await storage.memories.add_memories(["deploy target is canary"], user_id="U_ANA", run_id="run-1")
    await storage.memories.add_memories(["deploy window is 10:00"], user_id="U_ANA")
    plain = await storage.memories.search_memories("deploy", user_id="U_ANA")
    assert await texts(plain) == ["deploy window is 10:00"]
    with_run = await storage.memories.search_memories("deploy target", user_id="U_ANA", run_id="run-1")
    assert sorted(await texts(with_run)) == ["deploy target is canary", "deploy window is 10:00"]
    other_run = await storage.memories.search_memories("deploy", user_id="U_ANA", run_id="run-2")
    assert await texts(other_run) == ["deploy window is 10:00"]


async def test_agent_scope_narrows(storage):
    await storage.memories.add_memories(["deploys via argo"], agent_id="ops")
    await storage.memories.add_memories(["deploys via jenkins"], agent_id="ci")
    assert await texts(await storage.memories.search_memories("deploys", agent_id="ops")) == ["deploys via argo"]


async def test_filters_nest_and_or_not_over_metadata_and_scope(storage):
    await storage.memories.add_memories(
        ["service alpha runs 3 replicas"], user_id="U_ANA", metadata={"channel": "C1", "replicas": 3, "prod": True}
    )
    await storage.memories.add_memories(
        ["service beta runs 5 replicas"], user_id="U_BOB", metadata={"channel": "C1", "replicas": 5, "prod": False}
    )
    await storage.memories.add_memories(
        ["service gamma runs 9 replicas"], user_id="U_ANA", metadata={"channel": "C2", "replicas": 9}
    )

    async def matching(filters: dict) -> list[str]:
        return sorted(m.text.split()[1] for m in await storage.memories.search_memories("service", filters=filters))

    assert await matching({"field": "meta.replicas", "operator": ">", "value": 4}) == ["beta", "gamma"]
    assert await matching({"field": "meta.replicas", "operator": "<=", "value": 5}) == ["alpha", "beta"]
    assert await matching({"field": "meta.prod", "operator": "==", "value": True}) == ["alpha"]
    assert await matching({"field": "meta.prod", "operator": "!=", "value": True}) == ["beta", "gamma"]
    assert await matching({"field": "meta.prod", "operator": "==", "value": None}) == ["gamma"]
    assert await matching({"field": "user_id", "operator": "in", "value": ["U_BOB", "U_CAT"]}) == ["beta"]
    assert await matching({"field": "meta.channel", "operator": "not in", "value": ["C2"]}) == ["alpha", "beta"]
    assert await matching(
        {"operator": "AND", "conditions": [channel("C1"), {"field": "user_id", "operator": "==", "value": "U_ANA"}]}
    ) == ["alpha"]
    assert await matching(
        {"operator": "OR", "conditions": [channel("C2"), {"field": "meta.replicas", "operator": "==", "value": 5}]}
    ) == ["beta", "gamma"]
    assert await matching({"operator": "NOT", "conditions": [channel("C1")]}) == ["gamma"]
    assert await storage.memories.count_memories(filters={"operator": "NOT", "conditions": [channel("C1")]}) == 1


@pytest.mark.parametrize(
    "filters",
    [
        {"field": "meta.channel", "operator": "~", "value": "C1"},
        {"field": "channel", "operator": "==", "value": "C1"},
        {"field": "meta.a'b", "operator": "==", "value": "x"},
        {"field": "meta.channel", "operator": "=="},
        {"field": "meta.channel", "operator": "in", "value": "C1"},
        {"field": "meta.channel", "operator": "in", "value": []},
        {"field": "meta.replicas", "operator": ">", "value": None},
        {"field": "meta.channel", "operator": "==", "value": {"nested": 1}},
        {"field": "user_id", "operator": "==", "value": 7},
        {"operator": "AND", "conditions": []},
        {"operator": "XOR", "conditions": [{"field": "user_id", "operator": "==", "value": "U1"}]},
        {"operator": "AND", "conditions": [{"field": "user_id", "operator": "==", "value": "U1"}], "x": 1},
        ["not", "a", "dict"],
    ],
)
async def test_a_malformed_filter_is_refused_with_a_value_error(storage, filters):
    await storage.memories.add_memories(["deploys need approvers"], metadata={"channel": "C1"})
    with pytest.raises(FilterError):
        await storage.memories.search_memories("deploys", filters=filters)
    with pytest.raises(ValueError):
        await storage.memories.count_memories(filters=filters)
    with pytest.raises(ValueError):
        await storage.memories.delete_memories(filters=filters)
    assert await storage.memories.count_memories() == 1


async def test_adding_the_same_text_or_message_again_adds_nothing(storage):
    first = await storage.memories.add_memories(FACTS[:2], user_id="U_ANA")
    again = await storage.memories.add_memories(FACTS[:2], user_id="U_ANA")
    assert first == again and len(set(first)) == 2
    message = ChatMessage.from_user("Ana owns the billing service")
    assert await storage.memories.add_memories([message, message], user_id="U_ANA") == [message.id]
    assert await storage.memories.add_memories([message], user_id="U_ANA") == [message.id]
    assert await storage.memories.count_memories(user_id="U_ANA") == 3
    # The same fact for another person (or channel) is that person's own memory.
    await storage.memories.add_memories(FACTS[:1], user_id="U_BOB")
    await storage.memories.add_memories(FACTS[:1], metadata={"channel": "C1"})
    assert await storage.memories.count_memories() == 5


async def test_secrets_are_masked_before_a_memory_is_stored(storage):
    [memory_id] = await storage.memories.add_memories(
        ["the deploy API key is sk-proj-abcdefghijklmnopqrstuvwx1234"],
        user_id="U_ANA",
        metadata={"password": "hunter2", "note": "token=abc123def"},
    )
    [memory] = await storage.memories.search_memories("deploy key", user_id="U_ANA")
    assert memory.id == memory_id
    assert "sk-proj" not in memory.text and "••••••" in memory.text
    assert memory.metadata == {"password": "••••••", "note": "token=••••••"}


async def test_deletes_by_id_filters_and_scope(storage):
    ana = await storage.memories.add_memories(FACTS[:3], user_id="U_ANA")
    await storage.memories.add_memories(FACTS[:2], user_id="U_BOB")
    await storage.memories.add_memories(["freeze on Fridays"], metadata={"channel": "C1"})
    # An id of another person's memory is not deleted by a delete scoped to oneself.
    bob_ids = [m.id for m in await storage.memories.search_memories("", user_id="U_BOB", top_k=10)]
    assert await storage.memories.delete_memories(bob_ids[:1], user_id="U_ANA") == 0
    assert await storage.memories.delete_memories(ana[:1], user_id="U_ANA") == 1
    assert await storage.memories.delete_memories(ana[:1], user_id="U_ANA") == 0
    assert await storage.memories.delete_memories([]) == 0
    assert await storage.memories.delete_memories(filters=channel("C1")) == 1
    assert await storage.memories.delete_memories(user_id="U_ANA") == 2
    assert await storage.memories.count_memories() == 2
    with pytest.raises(ValueError):
        await storage.memories.delete_memories()
    assert await storage.memories.count_memories(user_id="U_BOB") == 2


async def test_an_empty_query_lists_the_newest_memories_in_scope(storage):
    for fact in FACTS:
        await storage.memories.add_memories([fact], user_id="U_ANA")
    newest = await storage.memories.search_memories("", user_id="U_ANA", top_k=2)
    assert await texts(newest) == [FACTS[-1], FACTS[-2]]
    assert await storage.memories.search_memories(None, user_id="U_BOB") == []


async def test_a_query_of_punctuation_or_quotes_is_harmless(storage):
    await storage.memories.add_memories(['O\'Brien owns the "edge" proxy'], user_id="U_ANA")
    found = await storage.memories.search_memories('O\'Brien "edge" OR NEAR(*) -- ; & | !', user_id="U_ANA")
    assert await texts(found) == ['O\'Brien owns the "edge" proxy']
    assert await storage.memories.search_memories("' \" * ( )", user_id="U_ANA", top_k=1) != []


async def test_memories_round_trip_through_to_dict(storage):
    await storage.memories.add_memories(["unicode déployer «prod»"], user_id="U_ANA", metadata={"k": [1, "x"]})
    [memory] = await storage.memories.search_memories("déployer", user_id="U_ANA")
    assert Memory.from_dict(memory.to_dict()) == memory
    assert memory.metadata == {"k": [1, "x"]}


async def test_ranking_holds_in_a_scope_with_hundreds_of_matching_memories(storage):
    await storage.memories.add_memories([f"deploy note number {i}" for i in range(400)], user_id="U_ANA")
    await storage.memories.add_memories(["checkout deploy needs two approvers"], user_id="U_ANA")
    await storage.memories.add_memories(["checkout deploy approvers are Ana and Bob"], user_id="U_BOB")
    found = await storage.memories.search_memories("checkout deploy approvers", user_id="U_ANA", top_k=3)
    assert found[0].text == "checkout deploy needs two approvers"
    assert [m.user_id for m in found] == ["U_ANA"] * 3


async def test_memories_that_match_equally_well_come_newest_first(storage):
    for text in ["deploy alpha", "deploy bravo", "deploy charlie"]:
        await storage.memories.add_memories([text], user_id="U_ANA")
    found = await storage.memories.search_memories("deploy", user_id="U_ANA")
    assert await texts(found) == ["deploy charlie", "deploy bravo", "deploy alpha"]
    assert len({m.score for m in found}) == 1
