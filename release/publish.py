"""``python -m release --registry HOST[:PORT][/PATH] [--version X.Y.Z]``: one release, pushed and written up.

The images come from components/image.py's builds (the one way an image is built here: the shipped Dockerfile by
buildah on the mmdebstrap base for the agent, the Collector distribution's binary for the Collector), run on a
staged copy of the source tree with the version stamped in (release/version.py), so a tree released at its own
version reuses the image its tests ran. Then, into the registry:

* ``REGISTRY/node-requests-agent:X.Y.Z`` and ``REGISTRY/otelcol-nra:X.Y.Z`` (crane push);
* ``REGISTRY/charts/node-requests-agent:X.Y.Z`` (helm push of the chart packaged with version = appVersion = X.Y.Z,
  its values naming the agent's image in the registry by digest);

and ``OUT/notes.md``: the CHANGELOG's section for X.Y.Z, the images' digests and the chart's reference. A registry
that is not there, refuses (401, 403) or a bad name stops it with one line and exit 1.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from release import ReleaseError
from release.notes import changelog_section, render_notes
from release.oci import Pushed, RegistryName, check_answers, parse_registry, push_chart, push_image
from release.version import check_version, source_version, stamp, stamp_version

__all__ = ["CHART_PATH", "PARTS", "main", "release", "staged"]

ROOT = Path(__file__).resolve().parent.parent
CHART_PATH = Path("charts") / "node-requests-agent"
PARTS = ("agent", "collector", "chart")
_VALUES_REPOSITORY = re.compile(r"^  repository: (.*)$", re.M)  # image.repository, the only such line
_VALUES_DIGEST = re.compile(r'^  digest: "(.*)"$', re.M)  # image.digest


def _one_line(error: BaseException) -> str:
    """A build step's error (the command, then its output's tail) as one line: the command and its last line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [repr(error)]
    return lines[0] if len(lines) == 1 else f"{lines[0][:300]}: {lines[-1][:300]}"


@contextmanager
def staged(source: Path, version: str) -> Iterator[Path]:
    """The files the agent's image and the chart are built from, copied out of ``source`` into a temporary folder
    and stamped with ``version`` (the image's build is cached by their content: components/image.py)."""
    from components.image import copy_context

    with tempfile.TemporaryDirectory(prefix="nra-release-") as tmp:
        stage = Path(tmp)
        copy_context(stage, source)
        shutil.copytree(source / CHART_PATH, stage / CHART_PATH)
        stamp_version(stage, version)
        yield stage


def _images(parts: Sequence[str], stage: Path, source: Path, registry: RegistryName, version: str,
            plain_http: bool) -> list[Pushed]:
    from components.gotools import tool_bin
    from components.image import AGENT_IMAGE, COLLECTOR_IMAGE, agent_image, collector_image

    crane = tool_bin("registry") / "crane"
    pushed = []
    if "agent" in parts:
        archive = agent_image(root=stage).archive
        pushed.append(push_image(crane, archive, f"{registry}/{AGENT_IMAGE.partition(':')[0]}:{version}", plain_http))
    if "collector" in parts:
        archive = collector_image(manifest=source / "otel-config" / "builder-config.yaml").archive
        name, _, distribution = COLLECTOR_IMAGE.partition(":")
        # At the release's version, and at the distribution's own tag, the one otel-config/'s Deployment and the
        # README's overlay name: a REGISTRY pointed at a release serves the Collector they ask for.
        for tag in (version, distribution):
            pushed.append(push_image(crane, archive, f"{registry}/{name}:{tag}", plain_http))
    return pushed


def _chart(stage: Path, registry: RegistryName, version: str, agent: Pushed | None, out: Path,
           plain_http: bool) -> Pushed:
    """The chart packaged at ``version``, its values naming the agent's image in the registry (by digest when it
    was pushed in this run), pushed to ``oci://REGISTRY/charts``."""
    from components.gotools import tool_bin

    helm = tool_bin("helm") / "helm"
    chart = stage / CHART_PATH
    values = chart / "values.yaml"
    if agent is not None:
        stamp(values, _VALUES_REPOSITORY, json.dumps(agent.reference.rpartition(":")[0]))  # "HOST:PORT/..." quoted
        stamp(values, _VALUES_DIGEST, agent.digest)
    packaged = subprocess.run([str(helm), "package", str(chart), "--version", version, "--app-version", version,
                               "--destination", str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if packaged.returncode != 0:
        said = (packaged.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise ReleaseError(f"helm package {chart} failed: {said}")
    package = out / f"{CHART_PATH.name}-{version}.tgz"
    return push_chart(helm, package, registry, plain_http, f"{registry}/charts/{CHART_PATH.name}:{version}")


def release(*, source: Path, version: str, registry: RegistryName, out: Path, parts: Sequence[str],
            plain_http: bool) -> Path:
    """Build, push and write the notes; returns the notes' path."""
    check_answers(registry, plain_http)
    out.mkdir(parents=True, exist_ok=True)
    try:  # the copy of the tree too: a source without a file the image needs is one line, not a traceback
        with staged(source, version) as stage:
            images = _images(parts, stage, source, registry, version, plain_http)
            agent = next((i for i in images if "/node-requests-agent:" in i.reference), None)
            chart = _chart(stage, registry, version, agent, out, plain_http) if "chart" in parts else None
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        raise ReleaseError(f"build failed: {_one_line(error)}") from None
    changelog = source / "CHANGELOG.md"
    changes = changelog_section(changelog.read_text() if changelog.exists() else None, version)
    notes = out / "notes.md"
    notes.write_text(render_notes(version, _described(source), changes, images, chart))
    return notes


def _described(source: Path) -> str:
    """The source tree and, when it is a git work tree, its commit (``+dirty`` with uncommitted changes)."""
    head = subprocess.run(["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return f"`{source}`"
    dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain"], capture_output=True, text=True)
    return f"commit `{head.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''}`"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", required=True, help="HOST[:PORT][/PATH] the images and the chart go to")
    parser.add_argument("--version", help="MAJOR.MINOR.PATCH (default: the source tree's pyproject.toml)")
    parser.add_argument("--source", type=Path, default=ROOT, help="the tree to release (default: this one)")
    parser.add_argument("--out", type=Path, help="where the chart package and notes.md go (default: dist/VERSION)")
    parser.add_argument("--plain-http", action="store_true", help="the registry speaks HTTP, not HTTPS")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, of {', '.join(PARTS)} (default: all)")
    args = parser.parse_args(argv)
    try:
        parts = [p for p in args.parts.split(",") if p]
        unknown = sorted(set(parts) - set(PARTS))
        if unknown or not parts:
            raise ReleaseError(f"--parts {args.parts!r}: each part is one of {', '.join(PARTS)}")
        source = args.source.resolve()
        version = check_version(args.version or source_version(source))
        registry = parse_registry(args.registry)
        notes = release(source=source, version=version, registry=registry, out=args.out or Path("dist") / version,
                        parts=parts, plain_http=args.plain_http)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr, flush=True)
        return 1
    print(notes.read_text(), end="", flush=True)
    print(f"release: notes written to {notes}", file=sys.stderr, flush=True)
    return 0
