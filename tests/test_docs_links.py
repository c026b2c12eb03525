"""Every relative link of the documentation leads somewhere.

Walks README.md, docs/**/*.md and benchmarks/README.md; for each markdown link or image
(`[text](target)`, `![alt](target)`, `[ref]: target`, `<img src="...">`) whose target is not a
URL, the file must exist, and an `#anchor` into a markdown file must name one of its headings
(GitHub's slugs) or an `<a id=...>` in it. Links inside code (fenced blocks, `inline`) are text,
not links, and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
REFERENCE = re.compile(r"^[ ]{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
HTML_SRC = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)=[\"']([^\"']+)[\"']", re.I)
HTML_ANCHOR = re.compile(r"<a\b[^>]*?\b(?:id|name)=[\"']([^\"']+)[\"']", re.I)
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documentation_files(root: Path = ROOT) -> list[Path]:
    files = [root / "README.md", root / "benchmarks" / "README.md"]
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def _prose(text: str) -> str:
    """The text with code blocks and inline code blanked out (line numbers kept)."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link and image in the markdown text."""
    prose = _prose(text)
    found = []
    for pattern in (INLINE_LINK, REFERENCE, HTML_SRC):
        for match in pattern.finditer(prose):
            target = match.group(1).strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            found.append((prose.count("\n", 0, match.start()) + 1, target))
    return sorted(found)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors a markdown file defines: its headings' slugs (GitHub numbers repeats)."""
    seen: dict[str, int] = {}
    result = set(HTML_ANCHOR.findall(text))
    for match in HEADING.finditer(FENCE.sub("", text)):
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(md: Path) -> list[str]:
    """What is wrong with the links of one markdown file, one line each."""
    problems = []
    for line, target in links(md.read_text(encoding="utf-8")):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto, ...: not checked here
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part)
        dest = (md.parent / path_part).resolve() if path_part else md
        where = f"{md.relative_to(ROOT) if md.is_relative_to(ROOT) else md}:{line}: ({target})"
        if not dest.exists():
            problems.append(f"{where} no such file {path_part}")
            continue
        if not anchor or not dest.is_file() or dest.suffix != ".md":
            continue
        if unquote(anchor).lower() not in anchors(dest.read_text(encoding="utf-8")):
            problems.append(f"{where} no heading #{anchor} in {dest.name}")
    return problems


FILES = documentation_files()


def test_there_are_documentation_files():
    names = {f.relative_to(ROOT).as_posix() for f in FILES}
    assert {"README.md", "benchmarks/README.md", "docs/results.md"} <= names


@pytest.mark.parametrize("md", FILES, ids=[f.relative_to(ROOT).as_posix() for f in FILES])
def test_relative_links_resolve(md):
    problems = broken_links(md)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_a_planted_broken_link_is_caught(tmp_path):
    (tmp_path / "there.md").write_text("# A heading: with `code`\n\ntext\n")
    (tmp_path / "fig.png").write_bytes(b"")
    md = tmp_path / "page.md"
    md.write_text(
        "# Page\n\n"
        "[ok](there.md) [ok](there.md#a-heading-with-code) ![ok](fig.png) [ok](#page)\n"
        "[web](https://example.org/nowhere.md) [mail](mailto:a@b.c)\n"
        "`[in code](missing_in_code.md)`\n\n"
        "```\n[in a block](missing_in_block.md)\n```\n\n"
        "[gone](missing.md) ![gone](figs/missing.png) [bad anchor](there.md#nope)\n"
        "[ref]: also_missing.md\n"
    )
    problems = broken_links(md)
    assert len(problems) == 4, problems
    joined = "\n".join(problems)
    for name in ("missing.md", "figs/missing.png", "#nope", "also_missing.md"):
        assert name in joined
    assert "in_code" not in joined and "in_block" not in joined


def test_slugs_follow_github():
    assert slug("Telling a head where to look: (`align.weight`, `retrieval.py --align`)") == (
        "telling-a-head-where-to-look-alignweight-retrievalpy---align"
    )
    assert slug("Distance: (`model.nope_layers=[-1]`)") == "distance-modelnope_layers-1"
    assert anchors("# A\n\n# A\n") == {"a", "a-1"}
