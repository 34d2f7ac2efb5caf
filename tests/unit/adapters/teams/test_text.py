"""Text for Teams: untrusted content can neither mention people nor forge links; long text is cut."""

from __future__ import annotations

from adapters.teams.text import MESSAGE_LIMIT, escape_text, markdown_message, plain_message, sanitize_markdown


def test_escaped_text_shows_mentions_html_and_markdown_literally():
    shown = escape_text("<at>Ana</at> **bold** [x](https://evil.example) & `code`")
    assert "<" not in shown and ">" not in shown
    assert shown.startswith("&lt;at&gt;Ana&lt;/at&gt; ")
    assert "\\*\\*bold\\*\\*" in shown and "\\[x\\]\\(https://evil.example\\)" in shown
    assert "&amp;" in shown and "\\`code\\`" in shown


def test_model_markdown_keeps_its_formatting():
    text = "**Done.**\n\n- deleted `old.log`\n- kept _notes.txt_\n\n```\nls -la\n```"
    assert sanitize_markdown(text) == text


def test_links_in_model_text_show_their_real_target():
    assert (
        sanitize_markdown("see [the docs](https://evil.example/login)") == "see the docs (https://evil.example/login)"
    )
    assert sanitize_markdown('[docs](https://a.example "title")') == "docs (https://a.example)"
    assert sanitize_markdown("![logo](https://img.example/x.png)") == "logo (https://img.example/x.png)"
    assert sanitize_markdown("[https://a.example](https://a.example)") == "https://a.example"


def test_reference_links_and_html_cannot_form_links_or_mentions():
    text = "click [here][1]\n\n[1]: https://evil.example\n<a href='https://evil.example'>x</a> <at>Ben</at>"
    shown = sanitize_markdown(text)
    assert "[" not in shown.replace("\\[", "") and "]" not in shown.replace("\\]", "")
    assert "<" not in shown and ">" not in shown
    assert "&lt;at&gt;Ben&lt;/at&gt;" in shown


def test_nested_brackets_cannot_smuggle_a_link_past_the_rewrite():
    shown = sanitize_markdown("[[inner](https://a.example)](https://evil.example)")
    assert "](" not in shown.replace("\\](", "")


def test_long_text_is_cut_to_the_limit_even_when_escaping_grows_it():
    plain = plain_message("<" * 50_000)
    assert len(plain) <= MESSAGE_LIMIT and plain.startswith("&lt;&lt;")
    marked = markdown_message("word " * 10_000)
    assert len(marked) <= MESSAGE_LIMIT and "chars)" in marked
    assert markdown_message("short") == "short"
