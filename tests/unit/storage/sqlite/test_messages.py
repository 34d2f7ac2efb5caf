"""SQLiteChatMessageStore: idempotent writes and last_k windows that never split a tool call."""

from __future__ import annotations

import time

import pytest
from sqlite_utils import Database

from bot.messages import ChatMessage, ChatRole
from storage import ChatMessageStore, CorruptRecord, SQLiteChatMessageStore, open_storage
from tests.fakes.storage_data import THREAD, tool_exchange


@pytest.fixture
def store(tmp_path):
    store = SQLiteChatMessageStore(tmp_path / "countersign.db", last_k=10)
    yield store
    store.close()


def conversation(n: int) -> list[ChatMessage]:
    """``n`` alternating user/assistant text messages."""
    return [
        ChatMessage.from_user(f"question {i}") if i % 2 == 0 else ChatMessage.from_assistant(f"answer {i}")
        for i in range(n)
    ]


def texts(messages: list[ChatMessage]) -> list[str | None]:
    return [m.text if m.text is not None else m.role.value for m in messages]


def test_write_returns_how_many_messages_were_new(store):
    first = conversation(3)
    assert store.write_messages(THREAD, first) == 3
    assert store.write_messages(THREAD, first) == 0
    assert store.write_messages(THREAD, [*first, ChatMessage.from_user("more")]) == 1
    assert store.count_messages(THREAD) == 4


def test_rewriting_a_message_keeps_its_place_and_content(store):
    question = ChatMessage.from_user("original")
    store.write_messages(THREAD, [question])
    clone = ChatMessage.from_dict({**question.to_dict(), "text": "edited"})  # same id, other text
    store.write_messages(THREAD, [clone, ChatMessage.from_assistant("reply")])
    assert texts(store.retrieve_messages(THREAD)) == ["original", "reply"]


def test_messages_round_trip_oldest_first_with_their_ids(store):
    messages = [ChatMessage.from_user("deploy please"), *tool_exchange(("deploy", {"env": "prod"}))]
    store.write_messages(THREAD, messages)
    assert [m.to_dict() for m in store.retrieve_messages(THREAD)] == [m.to_dict() for m in messages]


def test_last_k_larger_than_the_history_returns_everything(store):
    store.write_messages(THREAD, conversation(3))
    assert texts(store.retrieve_messages(THREAD, last_k=50)) == ["question 0", "answer 1", "question 2"]


def test_last_k_returns_the_newest_messages(store):
    store.write_messages(THREAD, conversation(6))
    assert texts(store.retrieve_messages(THREAD, last_k=2)) == ["question 4", "answer 5"]


def test_last_k_defaults_to_the_store_setting(tmp_path):
    store = SQLiteChatMessageStore(tmp_path / "c.db", last_k=3)
    store.write_messages(THREAD, conversation(8))
    assert len(store.retrieve_messages(THREAD)) == 3
    assert len(store.retrieve_messages(THREAD, last_k=None)) == 3
    store.close()


def test_a_window_starting_on_a_tool_result_reaches_back_to_the_call(store):
    store.write_messages(THREAD, [*conversation(2), ChatMessage.from_user("delete a.txt")])
    store.write_messages(THREAD, tool_exchange(("delete_file", {"path": "a.txt"})))
    window = store.retrieve_messages(THREAD, last_k=1)
    assert [m.role for m in window] == [ChatRole.ASSISTANT, ChatRole.TOOL]
    assert window[1].tool_call_result.origin.id == window[0].tool_calls[0].id


def test_a_parallel_call_keeps_all_its_results_whatever_k_cuts(store):
    store.write_messages(THREAD, [ChatMessage.from_user("check both")])
    exchange = tool_exchange(("disk_usage", {"host": "a"}), ("disk_usage_b", {"host": "b"}), ("uptime", {}))
    store.write_messages(THREAD, exchange)
    for k in (1, 2, 3):
        window = store.retrieve_messages(THREAD, last_k=k)
        assert [m.id for m in window] == [m.id for m in exchange], f"k={k}"
    assert len(store.retrieve_messages(THREAD, last_k=4)) == 4  # the call fits: nothing to reach for
    assert texts(store.retrieve_messages(THREAD, last_k=5))[0] == "check both"


def test_a_window_ending_after_the_results_does_not_reach_back(store):
    store.write_messages(THREAD, [*tool_exchange(("uptime", {})), ChatMessage.from_assistant("all good")])
    assert texts(store.retrieve_messages(THREAD, last_k=1)) == ["all good"]


def test_tool_results_with_no_call_before_them_are_left_out(store):
    orphans = tool_exchange(("uptime", {}))[1:]
    store.write_messages(THREAD, [*orphans, ChatMessage.from_user("hello")])
    assert texts(store.retrieve_messages(THREAD, last_k=2)) == ["hello"]


def test_system_messages_are_not_stored_by_default(store):
    written = store.write_messages(THREAD, [ChatMessage.from_system("You are careful."), *conversation(2)])
    assert written == 2
    assert store.count_messages(THREAD) == 2
    assert all(not m.is_from(ChatRole.SYSTEM) for m in store.retrieve_messages(THREAD))


def test_system_messages_are_kept_when_asked(tmp_path):
    store = SQLiteChatMessageStore(tmp_path / "c.db", skip_system_messages=False)
    store.write_messages(THREAD, [ChatMessage.from_system("You are careful."), ChatMessage.from_user("hi")])
    assert texts(store.retrieve_messages(THREAD)) == ["You are careful.", "hi"]
    store.close()


@pytest.mark.parametrize("k", [0, -1, True, 2.5])
def test_last_k_must_be_a_positive_integer(store, k):
    store.write_messages(THREAD, conversation(2))
    with pytest.raises(ValueError, match="last_k"):
        store.retrieve_messages(THREAD, last_k=k)


def test_the_store_refuses_a_default_last_k_below_one(tmp_path):
    with pytest.raises(ValueError, match="last_k"):
        SQLiteChatMessageStore(tmp_path / "c.db", last_k=0)


def test_threads_are_isolated_and_delete_clears_one(store):
    other = "slack:T1:C2:1700000001.000200"
    store.write_messages(THREAD, conversation(3))
    store.write_messages(other, conversation(2))
    assert store.delete_messages(THREAD) == 3
    assert store.retrieve_messages(THREAD) == []
    assert store.count_messages(other) == 2


def test_the_same_message_may_be_written_to_two_threads(store):
    shared = ChatMessage.from_user("cross-posted")
    assert store.write_messages(THREAD, [shared]) == 1
    assert store.write_messages("slack:T1:C2:1.2", [shared]) == 1


def test_sequence_keeps_increasing_across_reopening(tmp_path):
    path = tmp_path / "c.db"
    first = SQLiteChatMessageStore(path)
    first.write_messages(THREAD, conversation(2))
    first.close()
    second = SQLiteChatMessageStore(path)
    second.write_messages(THREAD, [ChatMessage.from_user("after restart")])
    assert texts(second.retrieve_messages(THREAD))[-1] == "after restart"
    seqs = [row["seq"] for row in second.connector.database().query("SELECT seq FROM messages ORDER BY seq")]
    assert seqs == [1, 2, 3]
    second.close()


def test_a_store_built_on_a_storage_shares_its_database(tmp_path):
    with open_storage(tmp_path / "c.db") as storage:
        store = SQLiteChatMessageStore(storage, last_k=5)
        store.write_messages(THREAD, conversation(2))
        assert storage.messages.count_messages(THREAD) == 2


def test_a_store_can_use_a_sqlite_utils_database(tmp_path):
    db = Database(tmp_path / "c.db")
    store = SQLiteChatMessageStore(db)
    store.write_messages(THREAD, conversation(2))
    assert db["messages"].count == 2
    assert isinstance(store, ChatMessageStore)


def test_a_corrupt_stored_message_names_its_thread(store):
    store.write_messages(THREAD, conversation(1))
    db = store.connector.database()
    db.execute("UPDATE messages SET data = '{not json'")
    with pytest.raises(CorruptRecord, match=THREAD) as caught:
        store.retrieve_messages(THREAD)
    assert caught.value.kind == "message"


OTHER_THREAD = "slack:T1:C2:1700000001.000200"


def test_a_row_holds_its_thread_as_a_number_and_only_what_the_message_needs(store):
    question = ChatMessage.from_user("how full is /var/log?")
    answer = ChatMessage.from_assistant("90%", meta={"model": "m1"})
    store.write_messages(THREAD, [question, answer])
    db = store.connector.database()

    assert db.execute("SELECT id, key FROM threads").fetchall() == [(1, THREAD)]  # the key, once
    assert db.execute("SELECT thread_id, seq, message_id, role, data FROM messages ORDER BY seq").fetchall() == [
        (1, 1, bytes.fromhex(question.id), "user", '{"text":"how full is /var/log?"}'),
        (1, 2, bytes.fromhex(answer.id), "assistant", '{"text":"90%","meta":{"model":"m1"}}'),
    ]


def test_a_thread_id_given_in_a_write_that_rolled_back_is_never_used_for_that_thread(tmp_path):
    path = tmp_path / "c.db"
    with open_storage(path) as first, open_storage(path) as second:  # two processes on one file
        with pytest.raises(RuntimeError, match="step failed"), first.connector.writing():
            first.messages.write_messages(THREAD, [ChatMessage.from_user("gone with the rollback")])
            raise RuntimeError("the step failed")
        second.messages.write_messages(OTHER_THREAD, [ChatMessage.from_user("elsewhere")])  # takes that id

        assert first.messages.write_messages(THREAD, [ChatMessage.from_user("kept")]) == 1

        assert texts(second.messages.retrieve_messages(THREAD)) == ["kept"]
        assert texts(second.messages.retrieve_messages(OTHER_THREAD)) == ["elsewhere"]


def test_deleting_or_pruning_a_threads_history_forgets_its_key(tmp_path):
    with open_storage(tmp_path / "c.db") as storage:
        storage.messages.write_messages(THREAD, conversation(2))
        storage.messages.write_messages(OTHER_THREAD, conversation(1))
        storage.messages.delete_messages(THREAD)
        keys = storage.db.execute("SELECT key FROM threads").fetchall()
        assert keys == [(OTHER_THREAD,)]
        storage.ops.prune(older_than=time.time() + 60)
        assert storage.db.execute("SELECT COUNT(*) FROM threads").fetchone()[0] == 0
        assert storage.messages.write_messages(OTHER_THREAD, conversation(1)) == 1  # and takes it back after
