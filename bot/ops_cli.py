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

from bot.config import MAX_RETENTION_SECONDS, Config, ConfigError

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
        [--audit]         and audit entries older than COUNTERSIGN_AUDIT_RETENTION_DAYS, as the sweep does
Only migrate creates a database; the others exit 2 with one line when there is none.
"""

AUDIT_DESCRIPTION = """\
The audit log is a hash chain: every entry stores the hash of the one before it. With COUNTERSIGN_AUDIT_KEY
(or COUNTERSIGN_AUDIT_KEY_FILE) every entry, pruning anchor and the head is also signed (see docs/audit.md).
  verify [--against ID:HASH[:SIG]]    exit 1 if an entry was edited or deleted, or the newest were cut off, or
                                      (with the key) something is unsigned; --against: a checkpoint from before
  checkpoint                          print the chain's head as ID:HASH[:SIG]; keep it somewhere else
  sign                                with the key set: sign the entries written before it (the chain is
                                      checked first; nothing is signed if anything but signatures is wrong)
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
    prune.add_argument(
        "--audit", action="store_true", help="also prune the audit log past COUNTERSIGN_AUDIT_RETENTION_DAYS"
    )
    prune.set_defaults(handler=_db_prune)

    audit = commands.add_parser(
        "audit",
        help="verify or export the tamper-evident audit log",
        description=AUDIT_DESCRIPTION,
        formatter_class=formatter,
    )
    audit.set_defaults(log_level="WARNING")
    audit_commands = audit.add_subparsers(dest="audit_command", metavar="{verify,checkpoint,sign,export}")
    audit_commands.required = True
    verify = audit_commands.add_parser("verify", help="check the hash chain (and the signatures, with the key)")
    verify.add_argument(
        "--against", type=_checkpoint, metavar="HEAD", help="a checkpoint (ID:HASH[:SIG]) taken earlier"
    )
    verify.set_defaults(handler=_audit_verify)
    audit_commands.add_parser("checkpoint", help="print the chain's head (ID:HASH[:SIG])").set_defaults(
        handler=_audit_checkpoint
    )
    audit_commands.add_parser(
        "sign", help="with the key: sign a log written before the key was set (after checking its chain)"
    ).set_defaults(handler=_audit_sign)
    export = audit_commands.add_parser("export", help="write the entries as JSON lines or CSV")
    export.add_argument("--since", type=_duration, metavar="AGE", help="only entries newer than this, e.g. 30d")
    export.add_argument("--format", choices=["jsonl", "csv"], default="jsonl", help="default: jsonl")
    export.add_argument("--output", type=Path, metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=_audit_export)


def _duration(text: str) -> int:
    from bot.durations import DurationError, duration_seconds

    if text.strip()[-1:].isdigit():  # "90" was 90 seconds; nobody prunes by seconds on purpose
        raise argparse.ArgumentTypeError(f"give the unit: {text.strip()[:20]}d (days), h, m or s")
    try:
        return duration_seconds(text, maximum=MAX_RETENTION_SECONDS, what="An age")
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run(work: Callable[[], Coroutine[Any, Any, int]], config: Config | None = None) -> int:
    from storage import DatabaseUnreachable, StorageError, UnknownSchemaVersion

    try:
        return asyncio.run(work())
    except DatabaseUnreachable as exc:
        if config is None:
            raise
        from bot.startup_errors import DatabaseUnavailable, describe

        raise DatabaseUnavailable(describe(exc, config), retryable=True) from None
    except (StorageError, UnknownSchemaVersion) as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _checkpoint(text: str) -> Any:
    from storage.audit_chain import AuditHead

    try:
        return AuditHead.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def require_database(config: Config) -> None:
    """Refuse (exit 2) to run a command that reads when the SQLite file does not exist: it would create it."""
    if not config.database_url and not Path(config.db_path).exists():
        raise ConfigError(
            f"COUNTERSIGN_DB: there is no database at {config.db_path} (set COUNTERSIGN_DB, or run "
            "countersign db migrate to create one)"
        )


async def _with_storage(config: Config, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """Open the configured storage (migrating it, as ``serve`` would), run ``work`` on it, close it."""
    from bot.startup_errors import quiet_pool
    from storage import open_async_storage

    with quiet_pool():
        storage = await open_async_storage(
            config.db_path,
            database_url=config.database_url,
            pool_size=2,
            audit_key=config.audit_key,
            connect_timeout=config.db_connect_timeout,
        )
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

    return _run(work, config)


def _db_check(_args: argparse.Namespace, config: Config) -> int:
    require_database(config)

    async def work() -> int:
        from storage.maintenance import schema_status

        status = await schema_status(config.db_path, config.database_url, connect_timeout=config.db_connect_timeout)
        if status.problem:
            print(f"countersign: {status.problem}", file=sys.stderr)
            return EXIT_FAILED
        print(f"schema version {status.current}: matches this countersign")
        return 0

    return _run(work, config)


def _db_backup(args: argparse.Namespace, config: Config) -> int:
    require_database(config)
    if config.database_url:
        print("countersign: db backup is for SQLite; back PostgreSQL up with pg_dump (see README)", file=sys.stderr)
        return EXIT_FAILED

    async def work() -> int:
        from storage.maintenance import backup_sqlite

        size = await asyncio.to_thread(backup_sqlite, config.db_path, args.path)
        print(f"backed up {config.db_path} to {args.path} ({size} bytes)")
        return 0

    return _run(work, config)


def _db_vacuum(_args: argparse.Namespace, config: Config) -> int:
    require_database(config)

    async def work() -> int:
        from storage.maintenance import vacuum

        await vacuum(config.db_path, config.database_url, connect_timeout=config.db_connect_timeout)
        print("vacuumed")
        return 0

    return _run(work, config)


def _db_prune(args: argparse.Namespace, config: Config) -> int:
    require_database(config)
    audit_seconds = config.audit_retention_seconds
    if args.audit and audit_seconds is None:
        raise ConfigError(
            "db prune --audit: COUNTERSIGN_AUDIT_RETENTION_DAYS is not set (the audit log is kept forever; "
            "audit verify refuses pruning anchors while it is off)"
        )
    if args.audit and args.dry_run:
        raise ConfigError("db prune --audit cannot --dry-run (the audit log's prune only deletes)")

    async def work() -> int:
        now = datetime.now(UTC)
        cutoff = now - timedelta(seconds=args.older_than)

        async def prune(storage: Any) -> tuple[Any, int | None]:
            counts = await storage.ops.prune(older_than=cutoff, dry_run=args.dry_run)
            audit = None
            if args.audit and audit_seconds is not None:
                audit = await storage.audit.prune(older_than=now - timedelta(seconds=audit_seconds))
            return counts, audit

        counts, audit = await _with_storage(config, prune)
        verb = "would delete" if args.dry_run else "deleted"
        parts = [f"{n} {what}" for what, n in counts.as_dict().items()]
        if audit is not None:
            parts.append(f"{audit} audit entries")
        print(f"{verb}: " + ", ".join(parts))
        return 0

    return _run(work, config)


def _audit_verify(args: argparse.Namespace, config: Config) -> int:
    require_database(config)
    prunes_allowed = config.audit_retention_seconds is not None

    async def work() -> int:
        result = await _with_storage(
            config, lambda s: s.audit.verify(prunes_allowed=prunes_allowed, against=args.against)
        )
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

    return _run(work, config)


def _audit_checkpoint(_args: argparse.Namespace, config: Config) -> int:
    require_database(config)

    async def work() -> int:
        head = await _with_storage(config, lambda s: s.audit.head())
        print(head.text())
        if head.signature is None:
            print("(not signed: set COUNTERSIGN_AUDIT_KEY to sign the chain)", file=sys.stderr)
        return 0

    return _run(work, config)


UNSIGNED = "not signed with the audit key"


def _audit_sign(_args: argparse.Namespace, config: Config) -> int:
    require_database(config)
    if config.audit_key is None:
        raise ConfigError("audit sign: set COUNTERSIGN_AUDIT_KEY or COUNTERSIGN_AUDIT_KEY_FILE first")
    prunes_allowed = config.audit_retention_seconds is not None

    async def sign(storage: Any) -> tuple[list[str], int]:
        result = await storage.audit.verify(prunes_allowed=prunes_allowed)
        other = [p for p in result.problems if UNSIGNED not in p]
        if other:
            return other, 0
        return [], await storage.audit.sign_unsigned()

    async def work() -> int:
        problems, signed = await _with_storage(config, sign)
        if problems:
            print("countersign: the audit log is not intact; nothing was signed:", file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return EXIT_FAILED
        print(f"signed {signed} entries and anchors, and the head")
        return 0

    return _run(work, config)


EXPORT_FIELDS = ("id", "at", "actor", "action", "subject", "details", "prev_hash", "hash")


def _audit_export(args: argparse.Namespace, config: Config) -> int:
    require_database(config)

    async def work() -> int:
        since = None if args.since is None else datetime.now(UTC) - timedelta(seconds=args.since)
        entries = await _with_storage(config, lambda s: s.audit.since(since))
        if args.output is not None:
            with args.output.open("w", encoding="utf-8", newline="") as out:
                write_entries(entries, args.format, out)
        else:
            write_entries(entries, args.format, sys.stdout)
        return 0

    return _run(work, config)


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
