"""The Agents SDK's logging: WARNING and up, and the anonymous-mode "App ID" warning once."""

from __future__ import annotations

import logging

import pytest

from adapters.teams.sdk_logging import SDK_LOGGER, USER_TOKEN_CLIENT_LOGGER, quiet_sdk_logging


@pytest.fixture
def sdk_logger():
    sdk = logging.getLogger(SDK_LOGGER)
    level = sdk.level
    sdk.setLevel(logging.NOTSET)
    yield sdk
    sdk.setLevel(level)


def test_the_sdk_logs_warnings_only_and_the_app_id_warning_once(sdk_logger, caplog):
    quiet_sdk_logging()
    quiet_sdk_logging()  # twice (two plugins, a restart in tests): still one filter
    tokens = logging.getLogger(USER_TOKEN_CLIENT_LOGGER)
    with caplog.at_level(logging.INFO):
        logging.getLogger(SDK_LOGGER + ".hosting.core.authorization.connection_manager").info("Connections: []")
        for _ in range(38):
            tokens.warning("App ID is not provided. Some operations may not work without an App ID.")
        tokens.warning("something else")

    messages = [r.getMessage() for r in caplog.records if r.name.startswith(SDK_LOGGER)]
    assert sum(m.startswith("App ID is not provided") for m in messages) <= 1
    assert "something else" in messages
    assert not any(m.startswith("Connections") for m in messages)
    assert sdk_logger.getEffectiveLevel() == logging.WARNING
