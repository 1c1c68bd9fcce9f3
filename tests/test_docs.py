"""The docs link only to files inside the repository, and the method document is there."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "ARCHITECTURE.md", "docs/method.md", "docs/benchmarks.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_stay_inside_the_repository(doc):
    path = os.path.join(ROOT, doc)
    if not os.path.exists(path):
        pytest.skip(f"{doc} not in this checkout")
    for target in LINK.findall(open(path, encoding="utf-8").read()):
        if re.match(r"[a-z]+://|#|mailto:", target):
            continue
        resolved = os.path.realpath(os.path.join(os.path.dirname(path), target.split("#")[0]))
        assert resolved.startswith(ROOT + os.sep), f"{doc} links outside the repository: {target}"
        assert os.path.exists(resolved), f"{doc} links to a missing file: {target}"


def test_readme_links_the_method_document():
    assert "](docs/method.md)" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()


def test_readme_links_the_benchmarks_and_the_architecture():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "](docs/benchmarks.md)" in readme and "](ARCHITECTURE.md)" in readme
