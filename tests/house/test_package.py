"""The package looks kept: its licence ships in the wheel, and the changelog and citation name this version."""

import re
import tomllib
from pathlib import Path

import modern_gpt

ROOT = Path(__file__).resolve().parents[2]


def test_licence_is_shipped_and_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_changelog_has_unreleased_then_this_version():
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings[0] == "Unreleased"
    assert headings[1].split()[0] == modern_gpt.__version__


def test_citation_names_this_version():
    text = (ROOT / "CITATION.cff").read_text()
    assert re.search(r"^version: (\S+)$", text, flags=re.M).group(1) == modern_gpt.__version__
    assert re.search(r"^cff-version: 1\.2\.0$", text, flags=re.M)


def test_pyproject_has_urls_authors_and_classifiers():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["authors"] and project["classifiers"] and project["urls"]["Changelog"].endswith("CHANGELOG.md")
