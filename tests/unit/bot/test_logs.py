"""Structured logs: every line of a run carries its context, in JSON (one object a line) and in text.

A real engine on a SQLite file, a scripted model; the log handler is the one ``countersign serve`` installs.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.cli import REQUEST_LOGGERS, configure_logging, log_handler
from bot.config import Config, ConfigError
from bot.engine.model import DecisionRequest
from bot.logs import log_context
from tests.fakes.engine_kit import REQUESTER, Harness, asks_for, says

SECRET = "sk-live-abcdefghijklmnopqrstuvwx"


@pytest.fixture
def captured() -> Iterator[dict[str, io.StringIO]]:
    """Both formats' output, from the root logger at INFO, as while serving."""
    streams = {"json": io.StringIO(), "text": io.StringIO()}
    handlers = [log_handler(stream, tracebacks=True, fmt=fmt) for fmt, stream in streams.items()]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)
    for handler in handlers:
        root.addHandler(handler)
    yield streams
    for handler in handlers:
        root.removeHandler(handler)
    root.setLevel(level)


async def test_json_lines_parse_and_carry_the_context_of_the_run(tmp_path, captured):
    h = await Harness.open(tmp_path, replies=[asks_for("set_secret", name="db", api_key=SECRET), says("Stored.")])
    try:
        [approval] = await h.paused_approvals("store the db key")
        await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
        await h.engine.wait_idle()
    finally:
        await h.close()

    lines = [json.loads(line) for line in captured["json"].getvalue().splitlines()]
    by_event = {line["event"]: line for line in lines}
    paused = by_event["run paused for approval"]
    assert paused["run_id"] == approval.run_id
    assert paused["thread_key"] == approval.thread.key
    assert paused["surface"] == approval.thread.platform
    assert paused["level"] == "info" and paused["timestamp"].endswith("Z")
    decided = by_event["decision recorded"]
    assert (decided["approval_id"], decided["tool"], decided["run_id"]) == (
        approval.approval_id,
        "set_secret",
        approval.run_id,
    )
    assert by_event["run finished"]["run_id"] == approval.run_id
    everything = captured["json"].getvalue() + captured["text"].getvalue()
    assert SECRET not in everything  # no tool arguments at INFO, and secrets masked wherever they appear

    text = captured["text"].getvalue()
    [paused_line] = [line for line in text.splitlines() if "run paused for approval" in line]
    assert f"run_id={approval.run_id}" in paused_line
    assert f"surface={approval.thread.platform}" in paused_line and "thread_key=" in paused_line


def test_context_is_bound_only_inside_its_block_and_extra_fields_win(captured):
    logger = logging.getLogger("bot.tests.logs")
    with log_context(run_id="run-outer", surface="slack"), log_context(tool="delete_file"):
        logger.info("inside", extra={"surface": "teams"})
    logger.info("outside")
    inside, outside = (json.loads(line) for line in captured["json"].getvalue().splitlines())
    assert (inside["run_id"], inside["tool"], inside["surface"]) == ("run-outer", "delete_file", "teams")
    assert "run_id" not in outside
    with pytest.raises(ValueError, match="user"):
        log_context(user="U1").__enter__()  # refused on entry, before anything is bound


def test_log_format_is_validated_at_start():
    assert Config.from_env({}, dotenv_path=None).log_format == "text"
    assert Config.from_env({"COUNTERSIGN_LOG_FORMAT": "JSON"}, dotenv_path=None).log_format == "json"
    with pytest.raises(ConfigError, match="COUNTERSIGN_LOG_FORMAT"):
        Config.from_env({"COUNTERSIGN_LOG_FORMAT": "xml"}, dotenv_path=None)


@pytest.mark.parametrize(
    ("level", "requests_shown", "warnings_shown"),
    [("INFO", False, True), ("DEBUG", True, True), ("ERROR", False, False)],
)
def test_the_http_clients_line_per_request_is_shown_at_debug_only(
    level: str, requests_shown: bool, warnings_shown: bool
) -> None:
    root = logging.getLogger()
    before = root.level, list(root.handlers), {name: logging.getLogger(name).level for name in REQUEST_LOGGERS}
    root.handlers.clear()  # as in a fresh process, so basicConfig installs the handler
    try:
        configure_logging(level, tracebacks=True)
        for name in REQUEST_LOGGERS:
            assert logging.getLogger(name).isEnabledFor(logging.INFO) is requests_shown
            assert logging.getLogger(name).isEnabledFor(logging.WARNING) is warnings_shown
        assert logging.getLogger("bot.engine.running").isEnabledFor(logging.INFO) is (level != "ERROR")
    finally:
        root.handlers[:] = before[1]
        root.setLevel(before[0])
        for name, old in before[2].items():
            logging.getLogger(name).setLevel(old)


# --- configured secrets never reach a log line, tracebacks included -----------------------------------------


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_configured_header_value_echoed_in_an_exception_is_masked_in_the_traceback(fmt: str) -> None:
    config = Config.from_env(
        {
            "COUNTERSIGN_LLM_HEADERS": '{"X-Gateway-Key": "gw-secret-777", "Authorization": "Bearer tok-98765"}',
            "OPENAI_API_KEY": "sk-test-1234567",
            "COUNTERSIGN_DATABASE_URL": "postgresql://u:pa55word@127.0.0.1:5432/test",
        },
        dotenv_path=None,
    )
    stream = io.StringIO()
    logger = logging.getLogger(f"countersign.test.secrets.{fmt}")
    logger.propagate = False
    logger.addHandler(log_handler(stream, tracebacks=True, fmt=fmt, secrets=config.secret_values()))
    try:
        raise RuntimeError("Error code: 500 - invalid api-key gw-secret-777 for route eu-1 (tok-98765, pa55word)")
    except RuntimeError:
        logger.exception("model call failed with sk-test-1234567")

    text = stream.getvalue()
    assert "Traceback" in text or '"exception"' in text, "the traceback is kept for operators"
    assert "route eu-1" in text
    for secret in ("gw-secret-777", "tok-98765", "pa55word", "sk-test-1234567"):
        assert secret not in text


def test_short_configured_values_are_not_hunted_for_in_log_text() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("countersign.test.secrets.short")
    logger.propagate = False
    logger.addHandler(log_handler(stream, tracebacks=True, secrets=["abc", "long-secret-value"]))
    logger.warning("abc is fine, long-secret-value is not")

    assert "abc is fine" in stream.getvalue()
    assert "long-secret-value" not in stream.getvalue()
