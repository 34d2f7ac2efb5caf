"""COUNTERSIGN_MCP_CONFIG: the shared mcpServers format, ${VAR} expansion, one-line errors (exit 2)."""

from __future__ import annotations

import json

import pytest

from bot.cli import main
from bot.mcp import MCPConfigError, load_mcp_config, mcp_tool_name, parse_mcp_config


def test_stdio_and_http_servers_are_read_and_variables_expand():
    servers = parse_mcp_config(
        {
            "mcpServers": {
                "fs": {
                    "command": "mcp-server-filesystem",
                    "args": ["/srv"],
                    "env": {"TOKEN": "${FS_TOKEN}"},
                    "cwd": "/",
                },
                "deploy": {
                    "url": "http://127.0.0.1:8931/mcp",
                    "headers": {"Authorization": "Bearer ${T}"},
                    "timeout": 3,
                },
            }
        },
        {"FS_TOKEN": "s3cret", "T": "tok"},
    )
    fs, deploy = servers
    assert (fs.transport, fs.args, dict(fs.env), fs.cwd) == ("stdio", ("/srv",), {"TOKEN": "s3cret"}, "/")
    assert (deploy.transport, dict(deploy.headers), deploy.timeout) == ("http", {"Authorization": "Bearer tok"}, 3.0)
    assert "s3cret" not in repr(fs) and "tok" not in repr(deploy)


def test_a_server_maps_a_tool_to_the_tool_that_previews_it():
    [deploy] = parse_mcp_config({"mcpServers": {"deploy": {"url": "http://h/mcp", "previews": {"apply": "plan"}}}}, {})
    assert dict(deploy.previews) == {"apply": "plan"}
    [bare] = parse_mcp_config({"mcpServers": {"fs": {"command": "a"}}}, {})
    assert dict(bare.previews) == {}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mcpServers": {"x": {"args": []}}}, "server 'x': has neither 'command' (stdio) nor 'url'"),
        ({"mcpServers": {"x": {"command": "a", "colour": 1}}}, "server 'x': unknown key 'colour'"),
        ({"mcpServers": {"x": {"url": "http://h/mcp", "env": {}}}}, "server 'x': unknown key 'env'"),
        ({"servers": {}}, "unknown key 'servers'"),
        (
            {"mcpServers": {"x": {"command": "a", "env": {"K": "${NOPE}"}}}},
            "server 'x': env.K uses ${NOPE}, but NOPE is not set",
        ),
        ({"mcpServers": {"x": {"url": "http://h", "headers": {"A": "${H}"}}}}, "headers.A uses ${H}, but H is not set"),
        ({"mcpServers": {"x": {"url": "ftp://h"}}}, "'url' must be an http:// or https:// address"),
        ({"mcpServers": {"a__b": {"command": "a"}}}, "without '__'"),
        ({"mcpServers": {"x": {"command": "a", "timeout": 0}}}, "'timeout' must be a positive number"),
        ({"mcpServers": {"x": {"command": "a", "previews": ["plan"]}}}, "'previews' must be an object"),
        ({"mcpServers": {"x": {"url": "http://h", "previews": {"apply": 1}}}}, "'previews' must be an object"),
        ({"mcpServers": {"x": {"command": "a", "previews": {"apply": "apply"}}}}, "cannot preview itself"),
        ({"mcpServers": {"x": {"command": "a", "previews": {"a b": "plan"}}}}, "tool names are 1-128"),
    ],
)
def test_a_bad_configuration_is_one_line_naming_the_server_and_the_key(data, message):
    with pytest.raises(MCPConfigError) as caught:
        parse_mcp_config(data, {})
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("COUNTERSIGN_MCP_CONFIG")


def test_a_malformed_file_names_the_line(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {,}}')
    with pytest.raises(MCPConfigError, match=r"is not valid JSON \(line 1"):
        load_mcp_config({"COUNTERSIGN_MCP_CONFIG": str(path)})
    with pytest.raises(MCPConfigError, match="does not exist"):
        load_mcp_config({"COUNTERSIGN_MCP_CONFIG": str(tmp_path / "none.json")})
    assert load_mcp_config({}) == []


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_chat_and_serve_stop_with_exit_2_and_one_line(tmp_path, monkeypatch, capsys, command):
    path = tmp_path / "mcp.json"
    path.write_text(
        json.dumps({"mcpServers": {"deploy": {"url": "http://h/mcp", "headers": {"A": "${DEPLOY_TOKEN}"}}}})
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DEPLOY_TOKEN", raising=False)
    monkeypatch.setenv("COUNTERSIGN_MCP_CONFIG", str(path))
    assert main([command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "server 'deploy'" in err and "DEPLOY_TOKEN is not set" in err


def test_names_fit_the_openai_pattern_and_are_disambiguated():
    assert mcp_tool_name("fs", "read_file") == "fs__read_file"
    assert mcp_tool_name("gh", "issues/list.all") == "gh__issues_list_all"
    long = mcp_tool_name("srv", "x" * 80)
    assert len(long) == 64 and long == mcp_tool_name("srv", "x" * 80)
    taken = {"a__b_c"}
    other = mcp_tool_name("a", "b.c", taken)
    assert other != "a__b_c" and len(other) <= 64
