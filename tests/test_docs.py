"""Every doc links only to files inside the repository that exist, and to headings that exist in them;
the README links the method, benchmark and architecture documents."""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted(
    {
        os.path.relpath(p, ROOT)
        for pattern in ("*.md", "docs/*.md", "docs/**/*.md")
        for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)
    }
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def _anchors(path: str) -> set:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes, repeats numbered."""
    text = FENCE.sub("", open(path, encoding="utf-8").read())
    seen: dict = {}
    anchors = set()
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", title).lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_doc_is_checked():
    assert {"README.md", "ARCHITECTURE.md", "docs/method.md", "docs/benchmarks.md"} <= set(DOCS)


@pytest.mark.parametrize("doc", DOCS)
def test_links_resolve_inside_the_repository(doc):
    path = os.path.join(ROOT, doc)
    for target in LINK.findall(FENCE.sub("", open(path, encoding="utf-8").read())):
        if re.match(r"[a-z]+://|mailto:", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.realpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        assert resolved.startswith(ROOT + os.sep), f"{doc} links outside the repository: {target}"
        assert os.path.exists(resolved), f"{doc} links to a missing file: {target}"
        if anchor and resolved.endswith(".md"):
            assert anchor in _anchors(resolved), f"{doc} links to a missing heading: {target}"


def test_readme_links_the_method_document():
    assert "](docs/method.md)" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_readme_links_the_benchmarks_and_the_architecture():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "](docs/benchmarks.md)" in readme and "](ARCHITECTURE.md)" in readme
