"""The ``countersign`` command: help, version, configuration errors, and the real console script.

Most tests run the real program in a subprocess (``python -m bot.cli``) in a tmp folder with a clean
environment, so entry-point discovery, exit codes and stderr are exactly what a user gets.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.metadata import version
from pathlib import Path

import psycopg
import pytest

from bot.cli import ConciseFormatter, build_parser, log_formatter, main
from bot.config import Config, ConfigError
from tests.fakes.openai_server import FakeOpenAIServer

TIMEOUT = 60
ENV_VARS = (
    "COUNTERSIGN_DB",
    "COUNTERSIGN_DATABASE_URL",
    "COUNTERSIGN_DB_POOL_SIZE",
    "COUNTERSIGN_DB_POOL_TIMEOUT",
    "COUNTERSIGN_MAX_ACTIVE_RUNS",
    "COUNTERSIGN_TOOLS",
    "COUNTERSIGN_ADMINS",
    "COUNTERSIGN_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "COUNTERSIGN_SLACK_API_URL",
    "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID",
    "COUNTERSIGN_TEAMS_ANONYMOUS",
    "COUNTERSIGN_TEAMS_USER_VIEWS",
    "COUNTERSIGN_HISTORY_LAST_K",
    "COUNTERSIGN_SYSTEM_PROMPT",
    "COUNTERSIGN_GENERATION_KWARGS",
    "COUNTERSIGN_MAX_STEPS",
    "COUNTERSIGN_LLM_HEADERS",
    "COUNTERSIGN_STREAM_UPDATE_SECONDS",
    "COUNTERSIGN_LLM_TIMEOUT",
    "COUNTERSIGN_LLM_RETRIES",
    "COUNTERSIGN_DEFAULT_TTL",
    "COUNTERSIGN_INSTANCE_ID",
    "COUNTERSIGN_LEASE_SECONDS",
    "COUNTERSIGN_HEARTBEAT_SECONDS",
    "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS",
    "COUNTERSIGN_SWEEP_SECONDS",
    "COUNTERSIGN_REPLY_MODE",
    "COUNTERSIGN_REMIND_AT",
    "COUNTERSIGN_PREVIEW_TIMEOUT",
)


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The current environment without any countersign, OpenAI, Slack or Teams setting (offline demo)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("COUNTERSIGN_", "OPENAI_", "SLACK_", "CONNECTIONS__"))
    }
    env.update({"COUNTERSIGN_DB": str(tmp_path / "cs.db"), "PYTHONUNBUFFERED": "1", "COLUMNS": "120"} | extra)
    return env


def countersign(tmp_path: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=tmp_path,
        env=clean_env(tmp_path, **env),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


@pytest.fixture
def terminal(tmp_path, monkeypatch):
    """In-process runs of ``main``: a clean environment, the tmp folder as working folder, typed stdin."""
    for name in list(os.environ):
        if name.startswith(("COUNTERSIGN_", "OPENAI_", "SLACK_", "CONNECTIONS__")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COUNTERSIGN_DB", str(tmp_path / "cs.db"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() may add the working folder

    def type_lines(text: str) -> None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))

    return type_lines


def help_text(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


# --- help and version ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [(), ("serve",)], ids=["countersign", "serve"])
def test_help_mentions_every_environment_variable(capsys, command):
    text = help_text(capsys, *command)

    missing = [name for name in ENV_VARS if name not in text]
    assert missing == []


def test_chat_help_lists_only_the_settings_that_apply_to_chat():
    from bot.cli import SERVE_ONLY_SETTINGS

    chat = subprocess.run(["countersign", "chat", "--help"], capture_output=True, text=True, check=True).stdout
    serve = subprocess.run(["countersign", "serve", "--help"], capture_output=True, text=True, check=True).stdout

    for name in ("SLACK_BOT_TOKEN", "COUNTERSIGN_REPLY_MODE", "COUNTERSIGN_TEAMS_ANONYMOUS", "COUNTERSIGN_FAILPOINT"):
        assert name in SERVE_ONLY_SETTINGS and name not in chat and name in serve, name
    for name in ENV_VARS:
        if name.split(",")[0] not in SERVE_ONLY_SETTINGS and not name.startswith(("SLACK_", "CONNECTIONS__")):
            assert name in chat, name
    assert "third Ctrl-C quits without waiting" in " ".join(chat.split())


def test_chat_help_explains_its_flags_and_the_approval_answers(capsys):
    text = help_text(capsys, "chat")

    for flag in ("--thread NAME", "--db PATH", "--user NAME", "--log-level"):
        assert flag in text
    assert "Enter alone never approves" in text
    assert "y  approve" in text and "n  reject" in text and "m  modify" in text


def test_serve_help_explains_its_routes_and_flags(capsys):
    text = help_text(capsys, "serve")

    for part in ("--host", "--port", "POST /slack/events", "POST /api/messages", "GET  /healthz"):
        assert part in text


def test_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])

    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"countersign {version('countersign')}"


def test_a_command_is_required():
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([])

    assert exit_info.value.code == 2


def test_chat_help_names_every_slash_command_and_the_offline_call_form(capsys):
    from bot.engine.admin_syntax import COMMAND_WORDS

    with pytest.raises(SystemExit):
        main(["chat", "--help"])
    text = " ".join(capsys.readouterr().out.split())

    for word in (*COMMAND_WORDS, "quit"):
        assert f"/{word}" in text, word
    assert '"call <tool> key=value ..."' in text


# --- configuration errors --------------------------------------------------------------------------------


def test_the_old_default_ttl_name_exits_2_saying_to_use_the_new_one(tmp_path):
    result = countersign(tmp_path, "chat", COUNTERSIGN_DEFAULT_TTL_SECONDS="3600")

    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "countersign: configuration error: COUNTERSIGN_DEFAULT_TTL_SECONDS was renamed: use COUNTERSIGN_DEFAULT_TTL "
        "(e.g. COUNTERSIGN_DEFAULT_TTL=24h; a plain number still means seconds)"
    ]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("99999999999999d", "A ttl can be at most 90d (90 days), not '99999999999999d'"),
        ("91d", "A ttl can be at most 90d (90 days), not '91d'"),
        ("0", "A ttl must be longer than zero, not '0'"),
        ("soon", "'soon' is not a duration; use e.g. 30m, 4h or 2d (a plain number is seconds)"),
    ],
)
def test_a_default_ttl_the_ttl_command_would_refuse_is_a_config_error_naming_the_variable(value, problem):
    with pytest.raises(ConfigError) as refused:
        Config.from_env({"COUNTERSIGN_DEFAULT_TTL": value})
    assert str(refused.value) == f"COUNTERSIGN_DEFAULT_TTL: {problem}"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("1", "COUNTERSIGN_DB_POOL_SIZE must be at least 2, got 1"),
        ("0", "COUNTERSIGN_DB_POOL_SIZE must be at least 2, got 0"),
        ("ten", "COUNTERSIGN_DB_POOL_SIZE must be a whole number, got 'ten'"),
        ("2.5", "COUNTERSIGN_DB_POOL_SIZE must be a whole number, got '2.5'"),
    ],
)
def test_a_pool_size_below_two_or_not_a_whole_number_is_a_config_error_naming_the_variable(value, problem):
    with pytest.raises(ConfigError) as refused:
        Config.from_env({"COUNTERSIGN_DB_POOL_SIZE": value})
    assert str(refused.value) == problem


def test_the_reply_mode_defaults_to_the_requester_and_refuses_anything_else():
    assert Config.from_env({}).reply_mode == "requester"
    assert Config.from_env({"COUNTERSIGN_REPLY_MODE": "Mention"}).reply_mode == "mention"
    with pytest.raises(ConfigError) as refused:
        Config.from_env({"COUNTERSIGN_REPLY_MODE": "everyone"})
    assert str(refused.value) == "COUNTERSIGN_REPLY_MODE must be one of requester, mention, all, got 'everyone'"


def test_the_pool_size_defaults_to_ten_connections_per_replica():
    assert Config.from_env({}).db_pool_size == 10
    assert Config.from_env({"COUNTERSIGN_DB_POOL_SIZE": "25"}).db_pool_size == 25


def test_the_pool_timeout_takes_a_duration_and_defaults_to_thirty_seconds():
    assert Config.from_env({}).db_pool_timeout == 30.0
    assert Config.from_env({"COUNTERSIGN_DB_POOL_TIMEOUT": "2m"}).db_pool_timeout == 120.0
    assert Config.from_env({"COUNTERSIGN_DB_POOL_TIMEOUT": "5"}).db_pool_timeout == 5.0
    for wrong in ("soon", "0", "2h"):
        with pytest.raises(ConfigError) as refused:
            Config.from_env({"COUNTERSIGN_DB_POOL_TIMEOUT": wrong})
        assert str(refused.value).startswith("COUNTERSIGN_DB_POOL_TIMEOUT: ")


def test_the_default_ttl_takes_the_durations_of_the_ttl_command_and_plain_seconds():
    assert Config.from_env({"COUNTERSIGN_DEFAULT_TTL": "4h"}).default_ttl_seconds == 4 * 3600
    assert Config.from_env({"COUNTERSIGN_DEFAULT_TTL": "2d"}).default_ttl_seconds == 2 * 86400
    assert Config.from_env({"COUNTERSIGN_DEFAULT_TTL": "900"}).default_ttl_seconds == 900
    assert Config.from_env({"COUNTERSIGN_DEFAULT_TTL": "90d"}).default_ttl_seconds == 90 * 86400
    assert Config.from_env({}).default_ttl_seconds == 24 * 3600


def test_a_bad_tools_setting_exits_2_with_one_clear_line(tmp_path):
    result = countersign(tmp_path, "chat", COUNTERSIGN_TOOLS="no_such_module:tools")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "countersign: configuration error: COUNTERSIGN_TOOLS: cannot import 'no_such_module:tools'"
    )


@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_tools_setting_is_refused_in_one_line_instead_of_meaning_the_demo_tools(tmp_path, value):
    result = countersign(tmp_path, "chat", COUNTERSIGN_TOOLS=value)

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "countersign: configuration error: COUNTERSIGN_TOOLS is set but empty: name module:attribute specs "
        "(e.g. mytools:tools), or unset it for the demo tools"
    ]


def test_a_bad_number_setting_exits_2_naming_the_variable(terminal, monkeypatch, capsys):
    monkeypatch.setenv("COUNTERSIGN_HISTORY_LAST_K", "lots")

    assert main(["serve"]) == 2
    assert capsys.readouterr().err == (
        "countersign: configuration error: COUNTERSIGN_HISTORY_LAST_K must be a whole number, got 'lots'\n"
    )


# --- a bad database path ---------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["chat", "serve"])
@pytest.mark.parametrize(
    ("make", "complaint"),
    [
        (lambda folder: folder / "no-such-folder" / "cs.db", "the folder {folder}/no-such-folder does not exist"),
        (lambda folder: folder, "{folder} is a folder; name a database file in it"),
        (lambda folder: _write(folder / "notes.txt", "not a database\n" * 200), "is not a SQLite database"),
    ],
    ids=["missing-folder", "a-folder", "not-a-database"],
)
def test_a_bad_database_path_exits_2_with_one_line_naming_the_variable(tmp_path, command, make, complaint):
    path = make(tmp_path)

    args = [command, "--port", "0"] if command == "serve" else [command]
    result = countersign(tmp_path, *args, COUNTERSIGN_DB=str(path))

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("countersign: configuration error: COUNTERSIGN_DB: ")
    assert complaint.format(folder=tmp_path) in line


# Root may write to any file, so the program drops to an unprivileged user first (after Python has
# started: the interpreter may live where that user cannot read), then runs the real ``main``.
AS_NOBODY = """
import os, sys
from bot.cli import build_parser, main
build_parser()  # imports what --version needs while it can
if os.geteuid() == 0:
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
sys.exit(main(["chat"]))
"""


def test_a_read_only_database_file_exits_2_naming_the_variable():
    folder = Path(tempfile.mkdtemp(prefix="countersign-ro-"))  # a folder that user may use
    try:
        folder.chmod(0o777)
        database = _write(folder / "cs.db", "")
        database.chmod(0o444)
        result = subprocess.run(
            [sys.executable, "-c", AS_NOBODY],
            cwd=folder,
            env=clean_env(folder, COUNTERSIGN_DB=str(database)),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
    finally:
        shutil.rmtree(folder)

    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"countersign: configuration error: COUNTERSIGN_DB: {database} is read-only; "
        "countersign must write to its database\n"
    )


def test_a_bad_db_flag_of_chat_exits_2_naming_the_flag(tmp_path):
    result = countersign(tmp_path, "chat", "--db", str(tmp_path / "gone" / "x.db"))

    assert result.returncode == 2
    assert result.stderr == (
        "countersign: configuration error: --db: "
        f"the folder {tmp_path}/gone does not exist (for {tmp_path}/gone/x.db)\n"
    )
    assert not (tmp_path / "cs.db").exists()


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_database_url_that_is_not_postgresql_exits_2_naming_the_variable(terminal, monkeypatch, capsys):
    monkeypatch.setenv("COUNTERSIGN_DATABASE_URL", "mysql://bot:hunter2@db.internal/countersign")

    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("countersign: configuration error: COUNTERSIGN_DATABASE_URL must be a postgresql:// URL")
    assert "hunter2" not in err


def test_a_postgresql_url_selects_postgresql_and_stays_out_of_the_config_repr():
    config = Config.from_env({"COUNTERSIGN_DATABASE_URL": "postgresql://bot:hunter2@db.internal/countersign"})

    assert config.database_url == "postgresql://bot:hunter2@db.internal/countersign"
    assert "hunter2" not in repr(config)
    assert Config.from_env({}).database_url is None


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"COUNTERSIGN_LEASE_SECONDS": "soon"}, "COUNTERSIGN_LEASE_SECONDS must be a number of seconds, got 'soon'"),
        ({"COUNTERSIGN_SWEEP_SECONDS": "0"}, "COUNTERSIGN_SWEEP_SECONDS must be a positive number of seconds, got '0'"),
        (
            {"COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": "-1"},
            "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS must be zero or a positive number of seconds, got '-1'",
        ),
        (
            {"COUNTERSIGN_LEASE_SECONDS": "5", "COUNTERSIGN_HEARTBEAT_SECONDS": "5"},
            "COUNTERSIGN_HEARTBEAT_SECONDS (5) must be less than COUNTERSIGN_LEASE_SECONDS (5)",
        ),
        ({"COUNTERSIGN_PREVIEW_TIMEOUT": "soon"}, "COUNTERSIGN_PREVIEW_TIMEOUT: 'soon' is not a duration"),
        (
            {"COUNTERSIGN_PREVIEW_TIMEOUT": "0"},
            "COUNTERSIGN_PREVIEW_TIMEOUT: A preview time-out must be longer than zero",
        ),
    ],
    ids=[
        "lease-not-a-number",
        "sweep-zero",
        "grace-negative",
        "heartbeat-not-below-lease",
        "preview-timeout-not-a-duration",
        "preview-timeout-zero",
    ],
)
def test_a_bad_lifecycle_setting_exits_2_naming_the_variable(terminal, monkeypatch, capsys, settings, error):
    for name, value in settings.items():
        monkeypatch.setenv(name, value)

    assert main(["serve"]) == 2
    assert capsys.readouterr().err.startswith(f"countersign: configuration error: {error}")


def test_lifecycle_settings_are_read_with_fractions_and_each_process_gets_its_own_instance_id():
    env = {
        "COUNTERSIGN_SWEEP_SECONDS": "0.2",
        "COUNTERSIGN_LEASE_SECONDS": "3",
        "COUNTERSIGN_HEARTBEAT_SECONDS": "1",
        "COUNTERSIGN_SHUTDOWN_GRACE_SECONDS": "0",
    }
    config = Config.from_env(env)
    assert (config.sweep_interval_seconds, config.lease_seconds, config.heartbeat_seconds) == (0.2, 3.0, 1.0)
    assert config.shutdown_grace_seconds == 0.0
    assert Config.from_env({}).instance_id != Config.from_env({}).instance_id
    assert str(os.getpid()) in Config.from_env({}).instance_id
    assert Config.from_env({"COUNTERSIGN_INSTANCE_ID": "web-1"}).instance_id == "web-1"
    assert Config.from_env({}).preview_timeout_seconds == 10.0
    assert Config.from_env({"COUNTERSIGN_PREVIEW_TIMEOUT": "2m"}).preview_timeout_seconds == 120.0


# --- the real console script ------------------------------------------------------------------------------


def test_chat_finds_the_console_adapter_and_approves_a_delete(terminal, tmp_path, capsys):
    terminal("delete old.log\ny\n")

    assert main(["chat", "--user", "ana"]) == 0

    out = capsys.readouterr().out
    assert "offline demo model" in out
    assert "Approval needed · delete_file" in out
    assert "Deleted old.log." in out
    assert not (tmp_path / "countersign-sandbox" / "old.log").exists()
    assert (tmp_path / "cs.db").exists()


def test_chat_on_postgresql_keeps_everything_in_the_database(terminal, tmp_path, monkeypatch, capsys, postgres_url):
    monkeypatch.setenv("COUNTERSIGN_DATABASE_URL", postgres_url)
    terminal("delete old.log\ny\n")

    assert main(["chat", "--user", "ana"]) == 0

    assert "Deleted old.log." in capsys.readouterr().out
    assert not (tmp_path / "cs.db").exists(), "COUNTERSIGN_DATABASE_URL wins over COUNTERSIGN_DB"
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT actor, action FROM audit ORDER BY id").fetchall() == [
            ("ana", "paused"),
            ("ana", "approved"),
            ("countersign", "finished"),
        ]


def test_chat_with_an_openai_compatible_server_pauses_asks_and_answers(terminal, tmp_path, monkeypatch, capsys):
    with FakeOpenAIServer() as llm:
        llm.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        llm.enqueue_text("I deleted **old.log** for you.")
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("COUNTERSIGN_MODEL", "fake-model")
        terminal("clean up the old log\ny\n")

        assert main(["chat", "--user", "ana"]) == 0

    out = capsys.readouterr().out
    assert "fake-model at http://127.0.0.1" in out
    assert "Approval needed · delete_file" in out
    assert "I deleted old.log for you." in out
    assert not (tmp_path / "countersign-sandbox" / "old.log").exists()
    assert [r["model"] for r in llm.requests] == ["fake-model", "fake-model"]
    assert llm.requests[1]["messages"][-1]["role"] == "tool"


def test_a_failing_model_gets_an_apology_in_the_chat(terminal, monkeypatch, capsys):
    with FakeOpenAIServer() as llm:
        llm.enqueue_error(400)
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        terminal("hello\n")

        assert main(["chat"]) == 0

    out = " ".join(capsys.readouterr().out.split())
    assert (
        "Sorry, the language model could not answer: the model server at "
        f"{llm.base_url.rstrip('/')} answered with an error (see the log)." in out
    )


def test_an_unreachable_model_server_is_named_in_the_chat_reply(terminal, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("COUNTERSIGN_LLM_RETRIES", "0")
    monkeypatch.setenv("COUNTERSIGN_LLM_TIMEOUT", "5")
    terminal("hello\n")

    assert main(["chat"]) == 0

    out = " ".join(capsys.readouterr().out.split())
    assert (
        "Sorry, the language model could not answer: the model server at http://127.0.0.1:1/v1 could not be reached."
        in out
    )


def test_chat_logs_an_exception_as_one_line_without_its_traceback():
    try:
        raise ConnectionError("model server unreachable")
    except ConnectionError:
        record = logging.getLogger("bot.engine.engine").makeRecord(
            "bot.engine.engine", logging.ERROR, __file__, 1, "run failed %s", ("run_1",), sys.exc_info()
        )

    line = ConciseFormatter("%(levelname)s %(name)s: %(message)s").format(record)

    assert line == "ERROR bot.engine.engine: run failed run_1 (ConnectionError: model server unreachable)"


@pytest.mark.parametrize("tracebacks", [False, True], ids=["chat", "serve"])
def test_every_log_line_prints_its_context_fields(tracebacks):
    record = logging.getLogger("bot.server").makeRecord(
        "bot.server",
        logging.INFO,
        __file__,
        1,
        "surface not configured; skipping",
        (),
        None,
        extra={"surface": "teams", "run_id": "run_1", "error": 'no "channel"\nfound', "attempt": 2},
    )

    line = log_formatter(tracebacks=tracebacks).format(record)

    assert line.endswith(
        'INFO bot.server: surface not configured; skipping surface=teams run_id=run_1 error="no \\"channel\\"\\nfound"'
        " attempt=2"
    )
    assert "\n" not in line, "one record, one line"
    for standard in ("lineno=", "process=", "thread=", "pathname=", "msg=", "args="):
        assert standard not in line


def test_context_fields_follow_the_message_before_a_folded_exception_and_mask_secrets():
    try:
        raise ConnectionError("model server unreachable")
    except ConnectionError:
        record = logging.getLogger("bot.engine.engine").makeRecord(
            "bot.engine.engine",
            logging.ERROR,
            __file__,
            1,
            "run failed",
            (),
            sys.exc_info(),
            extra={"run_id": "run_1", "detail": "Authorization: Bearer abc123def456"},
        )

    line = log_formatter(tracebacks=False).format(record)

    assert line.endswith(
        'run failed (ConnectionError: model server unreachable) run_id=run_1 detail="Authorization: Bearer ••••••"'
    )


def test_chat_db_flag_overrides_the_environment(terminal, tmp_path):
    terminal("")

    assert main(["chat", "--db", "elsewhere.db"]) == 0

    assert (tmp_path / "elsewhere.db").exists()
    assert not (tmp_path / "cs.db").exists()


def test_ctrl_c_at_the_chat_prompt_exits_0_at_once(tmp_path):
    """A real terminal: Ctrl-C while the prompt waits for a line ends the process (nothing blocks exit)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes the countersign process on the pty
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-m", "bot.cli", "chat", "--user", "ana"], clean_env(tmp_path))
    code = None
    try:
        seen = read_until(fd, "ana ›")  # prompt_toolkit draws the trailing space as a cursor move
        os.write(fd, b"\x03")
        code = wait_for_exit(pid)
        seen += read_all(fd)
    finally:
        if code is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert code == 0, seen
    assert "Bye." in seen and "Traceback" not in seen


def test_a_long_pasted_line_and_a_multi_line_paste_reach_the_model_whole_in_a_real_terminal(tmp_path):
    """In the terminal's canonical mode ``input()`` cut a line at 4,095 characters; prompt_toolkit does not."""
    long_line = "".join(f"word{n:05d} " for n in range(1_000))[:9_999] + "!"
    pasted = "first line of the paste\nsecond line\nthird line"
    with FakeOpenAIServer() as llm:
        llm.enqueue_text("Got the long one.")
        llm.enqueue_text("Got the paste.")
        env = clean_env(tmp_path, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test")
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the countersign process on the pty
            os.chdir(tmp_path)
            os.execve(sys.executable, [sys.executable, "-m", "bot.cli", "chat", "--user", "ana"], env)
        code = None
        try:
            read_until(fd, "ana ›")
            paste(fd, long_line)  # as a terminal pastes: bracketed
            read_until(fd, "Got the long one.", then="ana ›")
            paste(fd, pasted)
            read_until(fd, "Got the paste.", then="ana ›")
            os.write(fd, b"\x04")  # Ctrl-D
            code = wait_for_exit(pid)
        finally:
            if code is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)
    assert code == 0
    sent = [r["messages"][-1] for r in llm.requests]
    assert [m["role"] for m in sent] == ["user", "user"]
    assert sent[0]["content"] == long_line and len(sent[0]["content"]) == 10_000
    assert sent[1]["content"] == pasted, "a multi-line paste is one message"


def test_log_lines_print_above_the_spinner_never_over_it_in_a_real_terminal(tmp_path):
    """A model server that never answers: the run fails while the spinner spins, and its ERROR record is
    printed above the live line, never after the spinner's text."""
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        base_url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        env = clean_env(tmp_path, OPENAI_BASE_URL=base_url, COUNTERSIGN_LLM_RETRIES="0", COUNTERSIGN_LLM_TIMEOUT="1.5")
        pid, fd = pty.fork()
        if pid == 0:  # the child: becomes the countersign process on the pty
            os.chdir(tmp_path)
            os.execve(sys.executable, [sys.executable, "-m", "bot.cli", "chat", "--user", "ana"], env)
        code = None
        try:
            read_until(fd, "ana ›")
            os.write(fd, b"hello\r")
            seen = read_until(fd, "did not answer in time", then="ana ›")
            os.write(fd, b"\x04")  # Ctrl-D
            code = wait_for_exit(pid)
        finally:
            if code is None:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)
    assert code == 0
    assert "thinking…" in seen, "the spinner was up while the model call hung"
    logged = [line for line in seen.split("\n") if "ERROR" in line]
    assert logged, "the failed run logs an ERROR record"
    for line in logged:
        before = line.split("ERROR", 1)[0].rsplit("\r", 1)[-1]
        assert "thinking" not in before and not any(frame in before for frame in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"), repr(line)


def paste(fd: int, text: str) -> None:
    """Send ``text`` as a terminal's bracketed paste, then Enter; drains the echo so the child never blocks."""
    data = b"\x1b[200~" + text.encode() + b"\x1b[201~\r"
    while data:
        _, writable, _ = select.select([], [fd], [], 1)
        if writable:
            data = data[os.write(fd, data[:1024]) :]
        read_all(fd)


def read_until(fd: int, marker: str, then: str = "") -> str:
    """Read the terminal until ``marker`` appears (and ``then`` after it: say, the next prompt)."""
    deadline, seen = time.monotonic() + TIMEOUT, ""
    while marker not in seen or then not in seen.split(marker, 1)[1]:
        assert time.monotonic() < deadline, f"no {marker!r} within {TIMEOUT}s: {seen!r}"
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            seen += answer_cursor_requests(fd, os.read(fd, 4096).decode(errors="replace"))
    return seen


def answer_cursor_requests(fd: int, output: str) -> str:
    """Answer prompt_toolkit's cursor position requests as a terminal does (else it waits for them)."""
    for _ in range(output.count("\x1b[6n")):
        os.write(fd, b"\x1b[1;1R")
    return output


def read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the pty
            break
        if not chunk:
            break
        chunks.append(answer_cursor_requests(fd, chunk.decode(errors="replace")))
    return "".join(chunks)


def wait_for_exit(pid: int) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        select.select([], [], [], 0.05)  # poll the child's state, not a stand-in for an event
    raise AssertionError("countersign did not exit within 10 s of Ctrl-C")


# --- serve ---------------------------------------------------------------------------------------------------


def test_serve_answers_healthz_without_any_surface_and_stops_on_sigterm(tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", "0"],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = []
        url = None
        deadline = time.monotonic() + TIMEOUT
        while url is None:
            assert time.monotonic() < deadline and process.poll() is None, "".join(log)
            line = process.stderr.readline()
            log.append(line)
            if match := re.search(r"listening on (http://127\.0\.0\.1:\d+)", line):
                url = match.group(1)
        with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
            assert response.status == 200
            assert json.loads(response.read()) == {"status": "ok"}
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=TIMEOUT)[1]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    assert "serving only GET /healthz, GET /readyz, GET /metrics" in "".join(log)
    assert f"listening on {url} (GET /healthz, GET /readyz, GET /metrics)" in "".join(log)
    assert "surface not configured; skipping surface=slack" in "".join(log), "the log names the skipped surface"
    assert "surface not configured; skipping surface=teams" in "".join(log)
    assert "Traceback" not in "".join(log) + rest


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        (
            {"SLACK_BOT_TOKEN": "xoxb-1"},
            "SLACK_BOT_TOKEN is set but neither SLACK_SIGNING_SECRET (HTTP mode) nor SLACK_APP_TOKEN (Socket Mode) is",
        ),
        ({"SLACK_APP_TOKEN": "xapp-1"}, "SLACK_APP_TOKEN is set but SLACK_BOT_TOKEN is not"),
        (
            {"CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID": "6f1c3b0e-5d1a-4c2b-9e8f-00000000a11d"},
            "Teams: CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTID is set but "
            "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__TENANTID and "
            "CONNECTIONS__SERVICE_CONNECTION__SETTINGS__CLIENTSECRET are not",
        ),
    ],
    ids=["slack-bot-token-alone", "slack-app-token-alone", "teams-client-id-alone"],
)
def test_serve_with_half_set_credentials_exits_2_naming_the_missing_variable(tmp_path, env, complaint):
    result = countersign(tmp_path, "serve", "--port", "0", **env)

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line == f"countersign: configuration error: {complaint}"


# --- your own tools ---------------------------------------------------------------------------------------


def test_the_readme_tool_example_loads_from_the_working_folder_through_the_installed_script(tmp_path):
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n# mytools\.py\n(.*?)```", readme, re.DOTALL)
    assert example, "README.md lost its mytools.py example"
    (tmp_path / "mytools.py").write_text(example.group(1), encoding="utf-8")
    script = Path(sys.executable).with_name("countersign")

    result = subprocess.run(
        [str(script), "chat", "--user", "ana"],
        cwd=tmp_path,
        env=clean_env(tmp_path, COUNTERSIGN_TOOLS="mytools:tools"),
        input="/policy list\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )

    assert result.returncode == 0, result.stderr
    assert "scale_service: always" in result.stdout
    assert "service_status: never" in result.stdout


def test_the_readme_tools_can_be_tried_offline_with_call_and_with_words(tmp_path):
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n# mytools\.py\n(.*?)```", readme, re.DOTALL)
    assert example, "README.md lost its mytools.py example"
    (tmp_path / "mytools.py").write_text(example.group(1), encoding="utf-8")
    script = Path(sys.executable).with_name("countersign")

    result = subprocess.run(
        [str(script), "chat", "--user", "ana"],
        cwd=tmp_path,
        env=clean_env(tmp_path, COUNTERSIGN_TOOLS="mytools:tools"),
        input="call scale_service service=checkout replicas=3\ny\nscale web to 2 replicas\ny\nhello\n",
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )

    assert result.returncode == 0, result.stderr
    assert 'Try "call scale_service service=<string> replicas=<integer>' in result.stdout
    assert "list files" not in result.stdout.split("/help for commands")[0], "the banner offers the demo phrases"
    assert "checkout in eu now runs 3 replicas" in result.stdout
    assert "web in eu now runs 2 replicas" in result.stdout
    assert "call service_status service=<string>" in result.stdout


def test_teams_user_views_default_to_auto_and_refuse_anything_else():
    assert Config.from_env({}).teams_user_views == "auto"
    assert Config.from_env({"COUNTERSIGN_TEAMS_USER_VIEWS": "OFF"}).teams_user_views == "off"
    with pytest.raises(ConfigError) as refused:
        Config.from_env({"COUNTERSIGN_TEAMS_USER_VIEWS": "sometimes"})
    assert str(refused.value) == "COUNTERSIGN_TEAMS_USER_VIEWS must be one of auto, on, off, got 'sometimes'"
