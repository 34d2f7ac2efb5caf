"""Commands a conversation sends to PostgreSQL, counted by the engine benchmark's own counter (issue 26).

Every write is a batch, and a batch is one pipeline with no ``BEGIN`` and ``COMMIT`` of its own: also for a
message that waits its turn for a place (:mod:`bot.engine.admission`), stored alone and started later.
"""

from __future__ import annotations

from tests.fakes.bench_modules import engine_bench


async def test_conversations_beyond_the_admission_limit_send_no_begin_or_commit_and_at_most_40_commands(
    tmp_path, postgres_url
):
    bench = engine_bench()
    bench.COUNTER.install()  # wraps psycopg's senders to count; it changes nothing they send
    threads, places = 12, 2
    figures, _profile = await bench.run_conversations(
        threads, 0.0, tmp_path / "unused.db", database_url=postgres_url, max_active_runs=places
    )
    assert figures["failures"] == 0
    kinds = figures["commands_by_kind_per_conversation"]
    assert "BEGIN" not in kinds and "COMMIT" not in kinds, kinds
    assert figures["commands_per_conversation"] <= 40, kinds
