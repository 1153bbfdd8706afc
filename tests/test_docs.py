"""The documentation holds together: the README fits on a screen or two, and every relative link
of the README and of the pages under docs/ points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); the target ends at a space (a title) or the bracket.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?[^)]*\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def relative_links(page: Path) -> list[str]:
    """The link targets of ``page`` outside code blocks and inline code, less web addresses
    and anchors within the page."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_the_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move some to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file(page):
    missing = []
    for target in relative_links(page):
        path = (page.parent / unquote(target.split("#", 1)[0])).resolve()
        if not path.exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files: {missing}"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / t.split("#", 1)[0]).resolve() for t in relative_links(README)}
    pages = set((ROOT / "docs").glob("*.md"))
    assert pages <= linked, sorted(str(p.relative_to(ROOT)) for p in pages - linked)


def test_every_module_is_at_most_400_lines():
    long = {
        str(path.relative_to(ROOT)): n
        for package in ("arith", "sweeps")
        for path in (ROOT / package).rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > 400
    }
    assert long == {}


def test_every_spec_header_is_at_most_30_lines():
    """A spec's header says what the space shows, its measured time and result and the
    paper-size command; its history goes to docs/notes/."""
    long = {}
    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        lines = path.read_text(encoding="utf-8").splitlines()
        header = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
        if header > 30:
            long[path.name] = header
    assert long == {}
