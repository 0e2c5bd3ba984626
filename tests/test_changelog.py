"""CHANGELOG.md parses as Keep a Changelog, and its newest release is the version the package and pyproject state."""

import datetime
import re
import sys
from pathlib import Path

import pytest

import behavioral_pq

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
RELEASE = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def releases(text: str):
    """[(version tuple, date)] of the release headers, newest first as written; ValueError for a header that is
    neither ``## [Unreleased]`` (first) nor ``## [X.Y.Z] - YYYY-MM-DD``, or a section Keep a Changelog lacks."""
    headers = [line for line in text.splitlines() if line.startswith("## ")]
    if not headers or headers[0] != "## [Unreleased]":
        raise ValueError("the first release header must be '## [Unreleased]'")
    found = []
    for header in headers[1:]:
        match = RELEASE.fullmatch(header)
        if not match:
            raise ValueError(f"not a release header: {header!r}")
        found.append((tuple(int(g) for g in match.groups()[:3]),
                      datetime.date.fromisoformat(match.group(4))))
    for line in text.splitlines():
        if line.startswith("### ") and line[4:] not in SECTIONS:
            raise ValueError(f"not a Keep a Changelog section: {line!r}")
    return found


def test_the_changelog_parses_with_versions_and_dates_descending():
    found = releases((REPO / "CHANGELOG.md").read_text())
    assert found, "no released version"
    versions, dates = [v for v, _ in found], [d for _, d in found]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert dates == sorted(dates, reverse=True), dates


def test_the_package_pyproject_and_newest_release_agree():
    newest = ".".join(map(str, releases((REPO / "CHANGELOG.md").read_text())[0][0]))
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert behavioral_pq.__version__ == pyproject == newest


@pytest.mark.parametrize("text, message", [
    ("## [0.1.0] - 2026-11-21\n", "Unreleased"),
    ("## [Unreleased]\n## [0.2.0]\n", "not a release header"),
    ("## [Unreleased]\n## [0.2] - 2026-11-27\n", "not a release header"),
    ("## [Unreleased]\n### Improved\n", "section"),
])
def test_a_malformed_changelog_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        releases(text)


def test_versions_out_of_order_are_seen():
    found = releases("## [Unreleased]\n## [0.1.0] - 2026-11-21\n## [0.2.0] - 2026-11-27\n")
    assert [v for v, _ in found] != sorted((v for v, _ in found), reverse=True)
