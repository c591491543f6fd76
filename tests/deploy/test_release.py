"""The release command (release/): what it takes as a version and a registry, the notes it writes, and that every
refusal (a bad name, a registry that is not there, one that answers 401) is one line and exit 1, never a traceback.
Its push to a real registry and the install from there: tests/node/test_node_release.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from release import ReleaseError
from release.notes import changelog_section, render_notes
from release.oci import Pushed, parse_registry
from release.version import check_version, source_version, stamp_version
from testkit.plain_http import QuietHandler, answer, serve
from testkit.ports import free_ports
from testkit.repo import REPO


def release_command(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update({f"HELM_{n}_HOME": str(home / n.lower()) for n in ("CACHE", "CONFIG", "DATA")})
    return subprocess.run([sys.executable, "-m", "release", *args, "--out", str(home / "out")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def assert_one_line_refusal(result: subprocess.CompletedProcess, says: str) -> None:
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("release: "), result.stderr
    assert says in result.stderr, result.stderr
    assert result.stdout == "", result.stdout


@pytest.mark.parametrize("version", ["0.1.0", "1.0.0", "10.20.30"])
def test_a_plain_major_minor_patch_is_a_version(version: str) -> None:
    assert check_version(version) == version


@pytest.mark.parametrize("version", ["0.1", "v0.1.0", "0.1.0-rc.1", "0.1.0rc1", "01.2.3", "1.2.3.4", ""])
def test_what_helm_or_pip_would_read_otherwise_is_refused(version: str) -> None:
    with pytest.raises(ReleaseError, match="MAJOR.MINOR.PATCH"):
        check_version(version)


@pytest.mark.parametrize("text,host,path", [
    ("10.201.0.1:5000", "10.201.0.1:5000", ""),
    ("oci://registry.example:443/team/nra/", "registry.example:443", "/team/nra"),
    ("localhost/a_b/c-d", "localhost", "/a_b/c-d"),
    ("[::1]:5000/x", "[::1]:5000", "/x"),
])
def test_a_registry_is_host_port_and_path(text: str, host: str, path: str) -> None:
    name = parse_registry(text)
    assert (name.host, name.path, str(name)) == (host, path, host + path)


@pytest.mark.parametrize("text", ["10.201.0.1:5000/Team", "host:port/x", "host/a b", "host//x", "-host/x", ""])
def test_a_name_no_registry_takes_is_refused(text: str) -> None:
    with pytest.raises(ReleaseError, match=r"not HOST\[:PORT\]\[/PATH\]"):
        parse_registry(text)


def test_a_tree_is_stamped_in_a_copy_and_its_own_version_changes_no_byte(tmp_path: Path) -> None:
    for name in ("pyproject.toml", "agent/__init__.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    own = source_version(REPO)
    stamp_version(tmp_path, own)
    assert all((tmp_path / n).read_bytes() == (REPO / n).read_bytes() for n in ("pyproject.toml", "agent/__init__.py"))
    stamp_version(tmp_path, "7.8.9")
    assert source_version(tmp_path) == "7.8.9"
    assert '__version__ = "7.8.9"' in (tmp_path / "agent" / "__init__.py").read_text()
    assert source_version(REPO) == own  # the source tree is not written


CHANGELOG = """# Changelog

## [Unreleased]

- next thing

## [0.2.0] - 2027-01-10

### Fixed

- a thing

## [0.1.0] - 2026-12-20

- first
"""


def test_the_notes_take_the_changelogs_section_of_the_version() -> None:
    assert changelog_section(CHANGELOG, "0.2.0") == ("CHANGELOG.md, section [0.2.0]", "### Fixed\n\n- a thing")
    assert changelog_section(CHANGELOG, "0.1.0") == ("CHANGELOG.md, section [0.1.0]", "- first")
    said, text = changelog_section(CHANGELOG, "0.3.0")
    assert "no section [0.3.0]" in said and text == "- next thing"
    assert changelog_section(None, "0.1.0") == ("no CHANGELOG.md in the source tree", "")
    # this repository's own: a section for its version, or the Unreleased one said so
    said, text = changelog_section((REPO / "CHANGELOG.md").read_text(), source_version(REPO))
    assert said.startswith("CHANGELOG.md") and text


def test_the_notes_list_each_image_by_digest_and_how_to_install_the_chart() -> None:
    digest = "sha256:" + "ab" * 32
    images = [Pushed(reference="r.example:5000/nra/node-requests-agent:0.2.0", digest=digest)]
    chart = Pushed(reference="r.example:5000/nra/charts/node-requests-agent:0.2.0", digest="sha256:" + "cd" * 32)
    notes = render_notes("0.2.0", "commit `abc`", changelog_section(CHANGELOG, "0.2.0"), images, chart)
    assert notes.startswith("# node-requests-agent 0.2.0\n")
    assert "- a thing" in notes and "- first" not in notes and "next thing" not in notes
    assert f"| `{images[0].reference}` | `{digest}` |" in notes
    assert ("helm install node-requests-agent oci://r.example:5000/nra/charts/node-requests-agent --version 0.2.0"
            in notes)


def test_a_bad_registry_name_or_version_is_one_line(tmp_path: Path) -> None:
    port, = free_ports(1)  # never dialled: refused before
    assert_one_line_refusal(release_command("--registry", f"127.0.0.1:{port}/Upper", home=tmp_path), "not HOST")
    assert_one_line_refusal(release_command("--registry", f"127.0.0.1:{port}", "--version", "1.0", home=tmp_path),
                            "not MAJOR.MINOR.PATCH")
    assert_one_line_refusal(release_command("--registry", f"127.0.0.1:{port}", "--parts", "agent,docs",
                                            home=tmp_path), "each part is one of")


def test_a_registry_that_is_not_there_is_one_line_before_anything_is_built(tmp_path: Path) -> None:
    port, = free_ports(1)  # free: nothing listens on it
    result = release_command("--registry", f"127.0.0.1:{port}/nra", "--plain-http", home=tmp_path)
    assert_one_line_refusal(result, f"registry 127.0.0.1:{port} does not answer at http://127.0.0.1:{port}/v2/")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


class Unauthorized(QuietHandler):
    """A registry that wants credentials nobody gave: 401 with a Basic challenge to every request."""

    def _refuse(self) -> None:
        answer(self, 401, "application/json",
               b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
               {"WWW-Authenticate": 'Basic realm="nra-test"'})

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _refuse


def test_a_registry_that_answers_401_refuses_the_chart_in_one_line(tmp_path: Path) -> None:
    server = serve(Unauthorized)
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        result = release_command("--registry", f"{address}/nra", "--plain-http", "--parts", "chart", home=tmp_path)
    finally:
        server.shutdown()
    assert_one_line_refusal(result, f"the registry refused chart {address}/nra/charts/node-requests-agent:")
    # helm's words for the 401 (it asked for credentials it does not have)
    assert any(word in result.stderr.lower() for word in ("401", "unauthorized", "credential")), result.stderr


def test_a_source_tree_missing_what_the_image_needs_is_one_line(tmp_path: Path) -> None:
    """The copy of the tree is part of the build: a --source without the Dockerfile (a wrong folder) is one line,
    not a traceback (the review found one)."""
    source = tmp_path / "tree"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source / "pyproject.toml")
    server = serve(Unauthorized)
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        result = release_command("--registry", f"{address}/nra", "--plain-http", "--source", str(source),
                                 "--parts", "chart", home=tmp_path)
    finally:
        server.shutdown()
    assert_one_line_refusal(result, "build failed: ")
