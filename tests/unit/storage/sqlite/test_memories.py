"""SQLite's scoped memory search: BM25 over stems stored at write time, and an upgrade that fills them in."""

from __future__ import annotations

import math
import random
import re
from collections import Counter

from sqlite_utils import Database

from storage import MIGRATIONS, migrate
from storage.codec import dumps
from storage.memory_rows import memory_rows
from storage.sqlite.bm25 import K1, B, bm25_scores, bm25_scores_of_stems, stem, stems
from storage.sqlite.memories import SQLiteMemoryStore
from storage.sqlite.migrations import _memory_stems

WORDS = [
    "deploys",
    "deploy",
    "approvers",
    "approved",
    "staging",
    "clusters",
    "eu",
    "2",
    "billing",
    "owns",
    "rotation",
    "mondays",
    "logs",
    "kept",
    "days",
    "checkout",
    "nightly",
    "backups",
    "Ana",
    "déployer",
]


def reference_bm25(terms: list[str], texts: list[str], n_docs: int) -> list[float]:
    """BM25 as the scoped search defined it before stems were stored: each text tokenised and stemmed here."""
    wanted = {stem(term) for term in terms}
    docs = [[stem(w) for w in re.findall(r"\w+", text.lower())] for text in texts]
    average = sum(len(d) for d in docs) / len(docs) or 1.0
    total = max(n_docs, len(docs))
    df = Counter(t for d in docs for t in set(d) & wanted)
    scores = []
    for doc in docs:
        counts = Counter(w for w in doc if w in wanted)
        norm = K1 * (1.0 - B + B * len(doc) / average)
        scores.append(
            sum(
                math.log((total - df[t] + 0.5) / (df[t] + 0.5) + 1.0) * tf * (K1 + 1.0) / (tf + norm)
                for t, tf in counts.items()
            )
        )
    return scores


def test_bm25_over_stored_stems_scores_as_bm25_over_the_texts():
    rng = random.Random(14)
    for _ in range(300):
        texts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) for _ in range(rng.randint(1, 30))]
        terms = [w.lower() for w in rng.sample(WORDS, rng.randint(1, 5))]
        n_docs = len(texts) + rng.randint(0, 50)
        expected = reference_bm25(terms, texts, n_docs)
        for scores in (
            bm25_scores_of_stems(terms, [stems(t) for t in texts], n_docs),
            bm25_scores(terms, texts, n_docs),
        ):
            assert all(math.isclose(s, e, rel_tol=1e-12, abs_tol=1e-12) for s, e in zip(scores, expected, strict=True))


def test_a_word_repeated_next_to_itself_counts_every_time():
    # Whole words are counted: "eu eu" twice, and "eu" never inside "eur" or "eu2".
    once, twice, inside = bm25_scores_of_stems(["eu"], ["eu 2 eur", "eu eu eur", "eur eu2"], 3)
    assert twice > once > 0.0 == inside


def test_every_memory_keeps_the_stems_its_ranking_counts(tmp_path):
    store = SQLiteMemoryStore(tmp_path / "m.db")
    store.add_memories(["Checkout deploys need 2 approvers", "our staging clusters are in eu-2"], user_id="U_ANA")
    with store.connector.reading() as db:
        stored = db.execute("SELECT text, terms FROM memories ORDER BY seq").fetchall()
    assert stored == [
        ("Checkout deploys need 2 approvers", "checkout deploy need 2 approv"),
        ("our staging clusters are in eu-2", "our stag clust are in eu 2"),
    ]
    store.close()


def test_memories_that_match_equally_well_come_newest_first(tmp_path):
    # The same three words in another order: summed word by word in text order, the two scores differed in
    # their last bit and the older memory came first.
    store = SQLiteMemoryStore(tmp_path / "m.db")
    for text in ["alpha", "echo delta alpha zulu zulu zulu", "alpha delta echo zulu zulu zulu"]:
        store.add_memories([text], user_id="U_ANA")
    first, second = store.search_memories("echo delta alpha", user_id="U_ANA", top_k=2)
    assert (first.text, second.text) == ("alpha delta echo zulu zulu zulu", "echo delta alpha zulu zulu zulu")
    assert first.score == second.score
    store.close()


def write_memories_as_the_previous_schema(path, texts: list[str]) -> None:
    """A database as countersign left it before memories kept their stems: the rows its add wrote."""
    db = Database(path)
    migrate(db, target=MIGRATIONS.index(_memory_stems))  # the version just before it
    db.execute("BEGIN")
    db.conn.executemany(
        "INSERT INTO memories (id, text, user_id, run_id, agent_id, metadata, created_at, scope_tokens) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (row.id, row.text, row.user_id, row.run_id, row.agent_id, dumps(row.metadata), 1.0, row.scope_tokens)
            for row in memory_rows(texts, user_id="U_ANA", run_id=None, agent_id=None, metadata=None)
        ],
    )
    db.execute("COMMIT")
    db.conn.close()


def test_memories_written_before_the_upgrade_get_their_stems_and_rank_as_before(tmp_path):
    path = tmp_path / "m.db"
    facts = [
        "checkout deploys need two approvers",
        "the checkout page is owned by Ana",
        "our staging cluster is eu-2",
        "deploys to staging happen nightly",
    ]
    write_memories_as_the_previous_schema(path, facts)

    store = SQLiteMemoryStore(path)
    with store.connector.reading() as db:
        stored = dict(db.execute("SELECT text, terms FROM memories").fetchall())
        segments = db.execute("SELECT COUNT(DISTINCT segid) FROM memories_fts_idx").fetchone()[0]
        automerge = db.execute("SELECT v FROM memories_fts_config WHERE k = 'automerge'").fetchone()[0]
    assert stored == {text: stems(text) for text in facts}
    assert (segments, automerge) == (1, 2)  # merged at the upgrade, and two at a time from then on

    found = store.search_memories("who approves checkout deploys?", user_id="U_ANA")
    # BM25 over the candidates (the memories with a word of the question), among the 4 memories in scope.
    candidates = [facts[0], facts[1], facts[3]]
    expected = dict(zip(candidates, reference_bm25(["approves", "checkout", "deploys"], candidates, 4), strict=True))
    assert [m.text for m in found] == sorted(candidates, key=expected.__getitem__, reverse=True)
    assert all(math.isclose(m.score, expected[m.text], rel_tol=1e-12) for m in found)
    # and what is added after the upgrade is found beside them
    store.add_memories(["checkout approvers are Ana and Bob"], user_id="U_ANA")
    assert [m.text for m in store.search_memories("approvers Bob", user_id="U_ANA", top_k=1)] == [
        "checkout approvers are Ana and Bob"
    ]
    store.close()


def test_a_new_database_merges_its_text_index_two_segments_at_a_time(tmp_path):
    # FTS5 writes a segment per transaction and merges them 4 at a time by default: at 100,000 memories added
    # as the bench adds them that left 10 segments, and a search seeks each word in each segment (0.4-0.6 ms);
    # two at a time left 5 (0.2 ms). Small indexes look alike either way, so the setting itself is checked.
    store = SQLiteMemoryStore(tmp_path / "m.db")
    with store.connector.reading() as db:
        assert db.execute("SELECT v FROM memories_fts_config WHERE k = 'automerge'").fetchone()[0] == 2
    store.close()


def test_the_upgrade_fills_the_stems_of_more_memories_than_one_batch_holds(tmp_path):
    path = tmp_path / "m.db"
    write_memories_as_the_previous_schema(path, [f"note {i} about deploys" for i in range(10_001)])
    store = SQLiteMemoryStore(path)
    with store.connector.reading() as db:
        assert db.execute("SELECT COUNT(*) FROM memories WHERE terms = ''").fetchone()[0] == 0
        last = db.execute("SELECT terms FROM memories ORDER BY seq DESC LIMIT 1").fetchone()[0]
    assert last == stems("note 10000 about deploys")
    store.close()
