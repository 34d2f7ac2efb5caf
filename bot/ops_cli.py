"""``countersign db …`` and ``countersign audit …``: the commands an operator runs beside the service.

Each works on the configured database (``COUNTERSIGN_DB`` or ``COUNTERSIGN_DATABASE_URL``) and exits
0 on success, 1 when the check or the command failed (with one line saying why), 2 on a usage or
configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from bot.config import MAX_RETENTION_SECONDS, Config

EXIT_FAILED = 1

DB_DESCRIPTION = """\
Database maintenance (on COUNTERSIGN_DB, or COUNTERSIGN_DATABASE_URL when set):
  migrate                 bring the schema up to this version (serve does it too; run it before a rollout)
  check                   exit 1 unless the schema is exactly this version (newer: do not roll back onto it)
  backup PATH             SQLite: a consistent copy while the bot runs (online backup API); PostgreSQL: use
                          pg_dump (see README)
  vacuum                  give the space freed by pruning back (SQLite VACUUM; PostgreSQL VACUUM ANALYZE)
  prune --older-than 90d  delete ended runs, their approvals and ledger entries, idle threads' messages and
        [--dry-run]       delivered outbox rows older than that (never active runs or pending approvals)
"""

AUDIT_DESCRIPTION = """\
The audit log is a hash chain: every entry stores the hash of the one before it.
  verify                              exit 1 if an entry was edited or deleted, or the newest were cut off
  export [--since 30d] [--format jsonl|csv] [--output FILE]
                                      the entries (with their hashes), oldest first, to stdout or FILE
"""


def add_commands(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Add ``db`` and ``audit`` with their subcommands to ``countersign``'s subparsers."""
    db = commands.add_parser(
        "db",
        help="database maintenance: migrate, check, backup, vacuum, prune",
        description=DB_DESCRIPTION,
        formatter_class=formatter,
    )
    db.set_defaults(log_level="WARNING")
    db_commands = db.add_subparsers(dest="db_command", metavar="{migrate,check,backup,vacuum,prune}")
    db_commands.required = True
    db_commands.add_parser("migrate", help="bring the schema up to this version").set_defaults(handler=_db_migrate)
    db_commands.add_parser("check", help="exit 1 unless the schema is this version").set_defaults(handler=_db_check)
    backup = db_commands.add_parser("backup", help="SQLite: a consistent copy of the live database")
    backup.add_argument("path", type=Path, metavar="PATH", help="the new backup file (must not exist)")
    backup.set_defaults(handler=_db_backup)
    db_commands.add_parser("vacuum", help="give freed space back").set_defaults(handler=_db_vacuum)
    prune = db_commands.add_parser("prune", help="delete old ended runs, approvals, ledger entries and messages")
    prune.add_argument(
        "--older-than",
        required=True,
        type=_duration,
        metavar="AGE",
        help="e.g. 90d, 12h (days d, hours h, minutes m, seconds s)",
    )
    prune.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    prune.set_defaults(handler=_db_prune)

    audit = commands.add_parser(
        "audit",
        help="verify or export the tamper-evident audit log",
        description=AUDIT_DESCRIPTION,
        formatter_class=formatter,
    )
    audit.set_defaults(log_level="WARNING")
    audit_commands = audit.add_subparsers(dest="audit_command", metavar="{verify,export}")
    audit_commands.required = True
    audit_commands.add_parser("verify", help="check the hash chain").set_defaults(handler=_audit_verify)
    export = audit_commands.add_parser("export", help="write the entries as JSON lines or CSV")
    export.add_argument("--since", type=_duration, metavar="AGE", help="only entries newer than this, e.g. 30d")
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="default: jsonl")
    export.add_argument("--output", type=Path, metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=_audit_export)


def _duration(text: str) -> int:
    from bot.durations import DurationError, duration_seconds

    try:
        return duration_seconds(text, maximum=MAX_RETENTION_SECONDS, what="An age")
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    from storage import StorageError, UnknownSchemaVersion

    try:
        return asyncio.run(work())
    except (StorageError, UnknownSchemaVersion) as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def _with_storage(config: Config, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Open the configured storage (migrating it, as ``serve`` would), run ``work`` on it, close it."""
    from storage import open_async_storage

    storage = await open_async_storage(config.db_path, database_url=config.database_url, pool_size=2)
    try:
        return await work(storage)
    finally:
        await storage.aclose()


async def _nothing(_storage: Any) -> None:
    return None


def _db_migrate(_args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        await _with_storage(config, _nothing)  # opening migrates
        from storage.maintenance import schema_status

        status = await schema_status(config.db_path, config.database_url)
        print(f"schema version {status.current}: up to date")
        return 0

    return _run(work)


def _db_check(_args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        from storage.maintenance import schema_status

        status = await schema_status(config.db_path, config.database_url)
        if status.problem:
            print(f"countersign: {status.problem}", file=sys.stderr)
            return EXIT_FAILED
        print(f"schema version {status.current}: matches this countersign")
        return 0

    return _run(work)


def _db_backup(args: argparse.Namespace, config: Config) -> int:
    if config.database_url:
        print("countersign: db backup is for SQLite; back PostgreSQL up with pg_dump (see README)", file=sys.stderr)
        return EXIT_FAILED

    async def work() -> int:
        from storage.maintenance import backup_sqlite

        size = await asyncio.to_thread(backup_sqlite, config.db_path, args.path)
        print(f"backed up {config.db_path} to {args.path} ({size} bytes)")
        return 0

    return _run(work)


def _db_vacuum(_args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        from storage.maintenance import vacuum

        await vacuum(config.db_path, config.database_url)
        print("vacuumed")
        return 0

    return _run(work)


def _db_prune(args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        cutoff = datetime.now(UTC) - timedelta(seconds=args.older_than)
        counts = await _with_storage(config, lambda s: s.ops.prune(older_than=cutoff, dry_run=args.dry_run))
        verb = "would delete" if args.dry_run else "deleted"
        print(f"{verb}: " + ", ".join(f"{n} {what}" for what, n in counts.as_dict().items()))
        return 0

    return _run(work)


def _audit_verify(_args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        result = await _with_storage(config, lambda s: s.audit.verify())
        start = f" (pruned through entry {result.pruned_through})" if result.pruned_through else ""
        if result.ok:
            print(f"audit log intact: {result.checked} entries checked{start}")
            return 0
        print(
            f"audit log TAMPERED: {len(result.problems)} problem(s) in {result.checked} entries{start}", file=sys.stderr
        )
        for problem in result.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_FAILED

    return _run(work)


EXPORT_FIELDS = ("id", "at", "actor", "action", "subject", "details", "prev_hash", "hash")


def _audit_export(args: argparse.Namespace, config: Config) -> int:
    async def work() -> int:
        since = None if args.since is None else datetime.now(UTC) - timedelta(seconds=args.since)
        entries = await _with_storage(config, lambda s: s.audit.since(since))
        if args.output is not None:
            with args.output.open("w", encoding="utf-8", newline="") as out:
                write_entries(entries, args.format, out)
        else:
            write_entries(entries, args.format, sys.stdout)
        return 0

    return _run(work)


def write_entries(entries: list[Any], fmt: str, out: TextIO) -> None:
    """Write audit entries as JSON lines or CSV (``details`` as JSON text in CSV)."""
    rows = [
        {
            "id": e.id,
            "at": e.at.isoformat(),
            "actor": e.actor,
            "action": e.action,
            "subject": e.subject,
            "details": e.details,
            "prev_hash": e.prev_hash,
            "hash": e.hash,
        }
        for e in entries
    ]
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
        return
    writer: csv.DictWriter[str] = csv.DictWriter(out, fieldnames=EXPORT_FIELDS)
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "details": json.dumps(row["details"], ensure_ascii=False)})
