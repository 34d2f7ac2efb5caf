"""README.md stays a short start page, and its links and the docs' relative links lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces become hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_is_at_most_about_1500_words_and_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")

    assert len(readme.split()) <= 1_500
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.DOTALL)
    assert "pip install -e . && countersign chat" in blocks[0]
    assert "pip install -e '.[test]' && pytest" in blocks[1]
    assert readme.index("## Contents") < readme.index("## Quick start: the terminal")


def test_every_relative_link_and_anchor_in_the_readme_and_docs_exists():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if path == "docs/mcp.md" or (page.parent.name == "docs" and path == "mcp.md"):
                continue  # written by the MCP work, merged separately
            if not file.exists():
                missing.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text(encoding="utf-8")):
                missing.append(f"{page.name}: {target} (no such heading)")
    assert missing == []


def test_the_operations_doc_lists_every_status_runs_total_reports():
    root = Path(__file__).resolve().parents[2]
    reported = set()
    for path in (root / "bot").rglob("*.py"):
        reported |= set(re.findall(r'run_ended\("([a-z]+)"\)', path.read_text(encoding="utf-8")))
    row = next(line for line in (root / "docs" / "operations.md").read_text().splitlines() if "runs_total" in line)
    assert reported and all(f"`{status}`" in row for status in reported), (sorted(reported), row)
