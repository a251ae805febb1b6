"""The reference in docs/ builds: `mkdocs build --strict` (what `make docs` runs), into a
temporary directory, so that CI builds the docs with the offline tier.  --strict fails on a
warning: a broken link or anchor, a page left out of mkdocs.yml's nav, a nav entry naming no
page.  Skipped, saying why, where MkDocs or its Material theme is not installed (the `docs`
and `test` extras bring both)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> list[str]:
    return [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]


def test_the_docs_build_strictly(tmp_path):
    missing = _missing()
    if missing and os.environ.get("CI"):  # CI must build them: a skip there would hide a broken page
        pytest.fail(f"{' and '.join(missing)} not importable under CI: the test extra installs both")
    if missing:
        pytest.skip(f"{' and '.join(missing)} not importable: pip install -e '.[docs]' to build the docs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    for page in pages:
        built = tmp_path / "site" / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"docs/{page}.md was not built"


def test_every_page_is_in_the_nav():
    """A page no nav entry names is a page no reader finds (mkdocs only warns at INFO)."""
    nav = set(re.findall(r":\s*([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == nav, f"in docs/ but not the nav: {pages - nav}; in the nav, no page: {nav - pages}"


def test_the_built_site_is_ignored():
    assert "site/" in (ROOT / ".gitignore").read_text().split()


def test_make_docs_builds_strictly():
    """`make docs` is the strict build this test runs (a warning fails it)."""
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^docs:.*\n((?:\t.*\n)+)", make, re.M)
    assert recipe, "no docs target in the Makefile"
    assert re.search(r"mkdocs build --strict\b", recipe.group(1)), recipe.group(1)
