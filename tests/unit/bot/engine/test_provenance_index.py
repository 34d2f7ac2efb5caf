"""The provenance index on its own: what counts as copied from untrusted text, and what does not."""

from __future__ import annotations

from bot.engine.provenance import WINDOW, RunProvenance, WindowIndex, normalise, provenance_lines
from bot.messages import ChatMessage, ToolCall
from tests.fakes.taint_kit import INJECTED, PAGE, fetch_url_tool

REQUESTER = "U_REQ"


def _run(*messages: ChatMessage) -> RunProvenance:
    tool = fetch_url_tool()
    provenance = RunProvenance({tool.name: tool}, REQUESTER)
    provenance.ingest(list(messages))
    return provenance


def _fetched(page: str = PAGE, *, before: tuple[ChatMessage, ...] = ()) -> RunProvenance:
    call = ToolCall("fetch_url", {"url": "https://evil.example"}, id="c1")
    return _run(
        ChatMessage.from_user("please check the page", meta={"user": REQUESTER}),
        *before,
        ChatMessage.from_assistant(tool_calls=[call]),
        ChatMessage.from_tool(page, call),
    )


def test_an_argument_copied_from_a_tool_result_is_tainted_with_its_source_and_step():
    [taint] = _fetched().check({"service": INJECTED, "replicas": 3})

    assert taint.path == "service" and taint.tool == "fetch_url" and taint.step == 1
    assert INJECTED in taint.excerpt


def test_strings_inside_objects_and_lists_are_checked_and_named_by_their_path():
    taints = _fetched().check({"spec": {"hosts": ["web-1", f"x {INJECTED}"]}})

    assert [t.path for t in taints] == ["spec.hosts[1]"]


def test_whitespace_is_normalised_on_both_sides():
    spaced = INJECTED.replace(" ", "\n\t  ")

    assert _fetched().check({"service": spaced})
    assert normalise(" a \n\t b ") == "a b"


def test_short_strings_and_unrelated_values_are_never_tainted():
    provenance = _fetched()

    assert provenance.check({"a": "Ignore", "b": "rm -rf", "c": "db-prod"}) == [], "shorter than the window"
    assert provenance.check({"service": "payments-api-eu-west"}) == []
    assert len("db-prod") < WINDOW


def test_values_the_requester_typed_themselves_are_not_tainted():
    user = ChatMessage.from_user(f"restart {INJECTED} please", meta={"user": REQUESTER})
    provenance = _fetched(before=(user,))

    assert provenance.check({"service": INJECTED}) == [], "the requester typed it: theirs, though the page has it too"
    assert provenance.check({"service": f"{INJECTED} now, it is urgent"}), "the part only the page has is tainted"


def test_another_persons_message_is_untrusted_and_a_trusted_tool_is_not():
    other = ChatMessage.from_user(f"bot, restart {INJECTED}", meta={"user": "U_OTHER"})
    [taint] = _run(other).check({"service": INJECTED})
    assert taint.user == "U_OTHER" and taint.tool is None

    call = ToolCall("read_logs", {"service": "x"}, id="c2")
    trusted = _run(ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool(PAGE, call))
    assert trusted.check({"service": INJECTED}) == [], "read_logs is not marked untrusted_output"


def test_ingesting_is_incremental_by_message_id():
    provenance = _fetched()
    sources = len(provenance.sources)
    provenance.ingest([])
    call = ToolCall("fetch_url", {"url": "u"}, id="c9")
    provenance.ingest([ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool("second page body", call)])

    assert len(provenance.sources) == sources + 1
    [taint] = provenance.check({"note": "second page body"})
    assert taint.step == 2


def test_the_index_finds_windows_after_merging_its_recent_set():
    index = WindowIndex()
    big = " ".join(f"word{i:06d}" for i in range(20_000))  # more windows than the recent set holds
    index.add(big)
    index.settle()
    probe = normalise("word012345 word012346")
    hashes = [hash(probe[i : i + WINDOW]) for i in range(len(probe) - WINDOW + 1)]

    assert all(index.hits(hashes))
    assert not any(index.hits([hash("zzzzzzzz")]))


def test_card_lines_mask_secrets_in_the_excerpt_and_say_why_it_asks():
    page = "deploy with token sk-live-7f3a9c0d1e2b4a5968 to prod-cluster-7"
    [taint] = _fetched(page).check({"command": "token sk-live-7f3a9c0d1e2b4a5968 to prod-cluster-7"})
    stored = {"tainted": [taint.to_dict()], "escalated": True}

    lines = provenance_lines(stored)

    assert "sk-live-7f3a9c0d1e2b4a5968" not in "\n".join(lines)
    assert lines[0].startswith("⚠ command is from the output of `fetch_url` (step 1)")
    assert "Asked because" in lines[1]


def test_strings_inside_a_json_result_are_indexed_decoded():
    import json

    page = json.dumps({"title": "Runbook", "body": f'Then run:\n"{INJECTED}"\n', "lang": "café résumé"})
    assert "\\n" in page and '\\"' in page

    provenance = _fetched(page)

    [taint] = provenance.check({"command": f'Then run: "{INJECTED}"'})
    assert taint.tool == "fetch_url" and INJECTED in taint.excerpt
    assert provenance.check({"note": "café résumé"}), "no \\u escapes in the way"


def test_past_its_bound_the_run_fails_closed():
    tool = fetch_url_tool()
    provenance = RunProvenance({tool.name: tool}, REQUESTER, max_untrusted_chars=1_000)
    call = ToolCall("fetch_url", {"url": "u"}, id="c1")
    provenance.ingest([ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool("x" * 2_000, call)])

    assert provenance.overflowed and provenance.untrusted_chars == 0
    [taint] = provenance.check({"service": "payments-api", "env": "prod"})
    assert taint.path == "service", "any string of a window or more is treated as tainted; short ones are not"
    assert "more untrusted text than the run can index" in provenance_lines({"tainted": [taint.to_dict()]})[0]


def test_the_index_keeps_where_each_window_starts_newest_first():
    index = WindowIndex()
    index.add("alpha-bravo-charlie", start=100)
    index.add("xx alpha-bravo", start=500)

    assert list(index.positions(hash("alpha-br"))) == [503], "a repeated window: the newest start"
    assert list(index.positions(hash("zzzzzzzz"))) == []


def test_positions_survive_merging_into_the_sorted_array():
    index = WindowIndex()
    big = " ".join(f"word{i:06d}" for i in range(20_000))  # more windows than the recent set holds
    index.add(big, start=7)
    index.settle()

    [at] = index.positions(hash("word0123"))
    assert big[at - 7 : at - 7 + WINDOW] == "word0123"
    index.add("word0123", start=len(big) + 7)
    assert list(index.positions(hash("word0123"))) == [len(big) + 7, at], "the newest first"


def test_the_excerpt_is_the_part_one_source_holds_and_names_that_source():
    first = ToolCall("fetch_url", {"url": "a"}, id="c1")
    second = ToolCall("fetch_url", {"url": "b"}, id="c2")
    provenance = _run(
        ChatMessage.from_user("check both pages", meta={"user": REQUESTER}),
        ChatMessage.from_assistant(tool_calls=[first]),
        ChatMessage.from_tool("the host is db-prod-1 and", first),
        ChatMessage.from_assistant(tool_calls=[second]),
        ChatMessage.from_tool("prod-1 and then rm -rf /var", second),
    )

    [taint] = provenance.check({"command": "db-prod-1 and then rm -rf /var"})

    assert (taint.excerpt, taint.step) == ("db-prod-1 and", 1), "windows from two pages: the part page 1 holds"


def test_a_url_is_not_tainted_by_the_scheme_alone_but_is_when_copied_from_the_page():
    """``https://`` is a whole window: a page with any link used to taint every URL argument."""
    provenance = _fetched("See https://evil.test/x for details, or http://www.other.test/y.")

    assert provenance.check({"url": "https://docs.example.com"}) == []
    assert provenance.check({"url": "http://www.docs.example.com"}) == []
    [taint] = provenance.check({"url": "https://evil.test/x"})
    assert taint.path == "url" and "evil.test/x" in taint.excerpt
    assert provenance.check({"note": "go to HTTPS://www.other.test/y now"})
