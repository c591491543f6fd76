"""The release notes: the CHANGELOG's section for the version, then what was pushed, by digest (pure text work)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from release.oci import Pushed

__all__ = ["changelog_section", "render_notes"]

_HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\].*$", re.M)


def changelog_section(changelog: str | None, version: str) -> tuple[str, str]:
    """(where the text came from, the text) of the section ``## [version]`` (Keep a Changelog); without one, the
    ``## [Unreleased]`` section, said so; without a CHANGELOG, a line saying that."""
    if changelog is None:
        return "no CHANGELOG.md in the source tree", ""
    headings = list(_HEADING.finditer(changelog))
    for wanted, said in ((version, f"CHANGELOG.md, section [{version}]"),
                         ("Unreleased", f"CHANGELOG.md has no section [{version}]: its [Unreleased] section")):
        for i, heading in enumerate(headings):
            if heading["name"].strip().lower() == wanted.lower():
                end = headings[i + 1].start() if i + 1 < len(headings) else len(changelog)
                return said, changelog[heading.end():end].strip()
    return f"CHANGELOG.md has no section [{version}] and no [Unreleased] section", ""


def render_notes(version: str, source: str, changes: tuple[str, str], images: Sequence[Pushed],
                 chart: Pushed | None) -> str:
    said, text = changes
    lines = [f"# node-requests-agent {version}", "", f"Built from {source}.", "", "## What changed", "",
             f"({said})", ""]
    if text:
        lines += [text, ""]
    lines += ["## Images", ""]
    if images:
        lines += ["| image | digest |", "|---|---|"]
        lines += [f"| `{image.reference}` | `{image.digest}` |" for image in images]
    else:
        lines += ["None in this release."]
    if chart is not None:
        repository = chart.reference.rpartition(":")[0]
        names = ("its values name the agent's image above by its digest" if any(
            i.reference.rpartition(":")[0].endswith("/node-requests-agent") for i in images)
            else "its values name the agent's image as its source tree does")
        lines += ["", "## Chart", "", f"`{chart.reference}` (digest `{chart.digest}`); {names}.", "", "```",
                  f"helm install node-requests-agent oci://{repository} --version {version} "
                  "--namespace node-requests-agent", "```"]
    return "\n".join(lines) + "\n"
