"""Operations benchmark (SQLite): what the hash-chained audit log, retention and a backup cost.

    python bench/operations.py                     # 20,000 audit entries, 2,000 ended runs
    python bench/operations.py --entries 5000 --runs 500

Measures single audit appends per second (each reads and moves the chain's head in its transaction),
``audit verify`` time for the whole log, ``db prune`` time for the ended runs with their approvals and
messages, and ``db backup`` time. Prints a summary, then the figures as one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.messages import ChatMessage  # noqa: E402
from storage import NewApproval, open_storage  # noqa: E402
from storage.maintenance import backup_sqlite  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.db"
        with open_storage(path, synchronous="NORMAL") as storage:
            started = time.perf_counter()
            for n in range(args.entries):
                storage.audit.append("U_ANA", "approved", f"a-{n}", {"tool": "delete_file", "run_id": f"run-{n}"})
            append_seconds = time.perf_counter() - started

            started = time.perf_counter()
            result = storage.audit.verify()
            verify_seconds = time.perf_counter() - started
            assert result.ok and result.checked == args.entries

            old = datetime.now(UTC) - timedelta(days=100)
            for n in range(args.runs):
                thread = f"slack:T1:C1:{n}"
                storage.runs.create(
                    f"run-{n}",
                    chat_history_id=thread,
                    platform="slack",
                    workspace="T1",
                    channel="C1",
                    thread=str(n),
                    requester="U_ANA",
                    now=old,
                )
                [approval] = storage.approvals.create_many(
                    [
                        NewApproval(
                            run_id=f"run-{n}",
                            step=1,
                            tool_call_id="call_1",
                            tool_name="delete_file",
                            arguments={"path": f"/srv/{n}.log"},
                            requester="U_ANA",
                            platform="slack",
                            chat_history_id=thread,
                            expires_at=old + timedelta(hours=1),
                            created_at=old,
                        )
                    ]
                )
                storage.approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=old)
                storage.messages.write_messages(thread, [ChatMessage.from_user(f"delete {n}.log")])
                storage.runs.transition(f"run-{n}", "running", "finished")
            cutoff = datetime.now(UTC) + timedelta(seconds=1)
            started = time.perf_counter()
            counts = storage.ops.prune(older_than=cutoff)
            prune_seconds = time.perf_counter() - started
            assert counts.runs == args.runs

            started = time.perf_counter()
            size = backup_sqlite(path, Path(folder) / "backup.db")
            backup_seconds = time.perf_counter() - started

    figures = {
        "audit_appends_per_s": round(args.entries / append_seconds),
        "audit_verify_s": round(verify_seconds, 3),
        "audit_verify_entries_per_s": round(args.entries / verify_seconds),
        "prune_runs": args.runs,
        "prune_s": round(prune_seconds, 3),
        "backup_bytes": size,
        "backup_s": round(backup_seconds, 3),
    }
    print(
        f"audit: {figures['audit_appends_per_s']} single appends/s; verify {args.entries} entries in "
        f"{figures['audit_verify_s']} s; prune {args.runs} ended runs in {figures['prune_s']} s; "
        f"backup of {size} bytes in {figures['backup_s']} s"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
