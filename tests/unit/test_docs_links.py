"""The documentation in the repository is self-contained: its links resolve inside a clone.

Every relative markdown link (inline ``[text](target)`` and reference ``[ref]: target``) in
README.md and docs/*.md must name a file that exists in the repository (not outside it: a
link that leaves the tree works on one machine and is dead in every clone), and a
``#anchor`` must name a heading of its target. Code blocks and code spans are not links.
Nothing the product ships (slonkd/, docs/, README.md, deploy/, container/, scripts/) may
point at the design notes outside the repository (``../shared``, ``ARCHITECTURE.md``,
``REAL_SERVICES.md``): docs/architecture.md and docs/operations.md are their replacement.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
SHIPPED = ("slonkd", "docs", "README.md", "deploy", "container", "scripts")
OUTSIDE = ("../shared", "shared/ARCHITECTURE", "shared/REAL_SERVICES")
"""Names of the design notes outside the repository, in any case of path."""
OUTSIDE_FILES = ("ARCHITECTURE.md", "REAL_SERVICES.md")
"""... and the notes' file names (case-sensitive: docs/architecture.md is the repository's)."""

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and code spans (their brackets are not links)."""
    return _SPAN.sub("", _FENCE.sub("", text))


def links(text: str) -> list[str]:
    """Every link target of a markdown text, inline and reference-style."""
    prose = _prose(text)
    return _INLINE.findall(prose) + _REFDEF.findall(prose)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes for the headings of ``path`` (repeats get ``-1``, ``-2``)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken(md: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``md`` that do not resolve inside ``root`` (the repository)."""
    bad = []
    for target in links(md.read_text(encoding="utf-8")):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # absolute URL: not this test's business
        path_part, _, anchor = target.partition("#")
        dest = (md.parent / path_part).resolve() if path_part else md
        if not dest.is_relative_to(root):
            bad.append(f"{target}: leaves the repository")
        elif not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(root)}")
    return bad


def test_the_link_checker_sees_links_and_skips_code() -> None:
    """The parser finds inline, titled and reference links, and none inside code."""
    text = (
        'See [a](docs/a.md), [b](<docs/b.md>) and [c](x.md "title").\n'
        "[ref]: docs/ref.md#part\n"
        "`[not](code.md)`\n"
        "```\n[nor](block.md)\n```\n"
    )
    assert links(text) == ["docs/a.md", "docs/b.md", "x.md", "docs/ref.md#part"]
    assert slug("The writer table: who writes `what`") == "the-writer-table-who-writes-what"


def test_the_link_checker_flags_missing_files_anchors_and_links_out(tmp_path: Path) -> None:
    """A missing file, a missing heading and a link out of the tree are each reported."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "a.md").write_text("# Who writes what\n\n## Who writes what\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "ARCH.md").write_text("# x\n")  # exists, but outside the repo
    readme = repo / "README.md"
    readme.write_text(
        "[ok](docs/a.md#who-writes-what) [ok2](docs/a.md#who-writes-what-1) [web](https://x.io/y)\n"
        "[gone](docs/b.md) [anchor](docs/a.md#nope) [out](../shared/ARCH.md)\n"
    )
    assert broken(readme, repo) == [
        "docs/b.md: no such file",
        "docs/a.md#nope: no heading #nope in docs/a.md",
        "../shared/ARCH.md: leaves the repository",
    ]


@pytest.mark.parametrize("md", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(md: Path) -> None:
    """Each relative link of README.md and docs/*.md names an existing file (and heading)."""
    assert broken(md) == []


def test_architecture_and_operations_docs_exist_and_are_linked_from_the_readme() -> None:
    """A newcomer reaches the design and the runbook from the README."""
    readme = links((ROOT / "README.md").read_text(encoding="utf-8"))
    for doc in ("docs/architecture.md", "docs/operations.md"):
        assert (ROOT / doc).is_file(), doc
        assert any(t.partition("#")[0] == doc for t in readme), f"README does not link {doc}"


def _shipped_files() -> list[Path]:
    """Files under :data:`SHIPPED`, without caches and hidden build outputs (``.build``)."""
    files = []
    for name in SHIPPED:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        files += [
            p
            for p in candidates
            if p.is_file()
            and "__pycache__" not in p.parts
            and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
        ]
    return files


def test_nothing_shipped_points_outside_the_repository() -> None:
    """No code, doc, chart, image or script names ../shared or the notes kept outside the tree."""
    hits = []
    for path in _shipped_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            lowered = line.lower()
            if any(o.lower() in lowered for o in OUTSIDE) or any(f in line for f in OUTSIDE_FILES):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert hits == []
